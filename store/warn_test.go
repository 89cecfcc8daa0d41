package store_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// A store's warning goes through slog's default logger (the CLI's), once per process per message.
func TestWarnOncePerMessage(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	for range 3 {
		store.Warn("durability", "test-warn-a: off")
		store.Warn("durability", "test-warn-b: off")
	}
	out := buf.String()
	if strings.Count(out, "test-warn-a") != 1 || strings.Count(out, "test-warn-b") != 1 || strings.Count(out, `"check":"durability"`) != 2 {
		t.Fatalf("logged:\n%s", out)
	}
}
