package redis

import (
	"context"
	"slices"
	"testing"

	"github.com/once-run/once/store"
)

func TestDurabilityGrades(t *testing.T) {
	for _, c := range []struct {
		m    map[string]string
		want store.Level
	}{
		{map[string]string{"appendonly": "no", "appendfsync": "always"}, store.LevelFail},
		{map[string]string{"appendonly": "yes", "appendfsync": "no"}, store.LevelWarn},
		{map[string]string{"appendonly": "yes", "appendfsync": "everysec"}, store.LevelWarn},
		{map[string]string{"appendonly": "yes", "appendfsync": "always"}, store.LevelOK},
	} {
		if got, msg := durability(c.m); got != c.want || msg == "" {
			t.Errorf("%v: %s %q, want %s", c.m, got, msg, c.want)
		}
	}
}

func TestInspect(t *testing.T) {
	s, err := Open(context.Background(), serverDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs, err := s.Inspect(context.Background())
	fs = slices.DeleteFunc(fs, func(f store.Finding) bool { return f.Check == "history-index" }) // kvstore's, tested there
	if err != nil || len(fs) != 1 || fs[0].Check != "durability" || fs[0].Level != store.LevelOK {
		t.Fatalf("%+v %v: the test server runs with appendonly yes, appendfsync always", fs, err)
	}
}
