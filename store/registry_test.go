package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"mysql://once:p%40ss@127.0.0.1:3306/once":       "mysql://once:xxxxx@127.0.0.1:3306/once",
		"redis://:pw@127.0.0.1:6379/0":                  "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://127.0.0.1:6379/0?password=pw":          "redis://127.0.0.1:6379/0?password=xxxxx",
		"sqlite:///var/lib/once/once.db":                "sqlite:///var/lib/once/once.db",
		"etcd://u:p@a:2379,b:2379":                      "etcd://u:xxxxx@a:2379,b:2379",
	} {
		if got := store.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenUnknownScheme(t *testing.T) {
	for _, dsn := range []string{"mongo://x", "nothing", ":x", "a b://c"} {
		_, err := store.Open(context.Background(), dsn)
		if !errors.Is(err, store.ErrBadDSN) {
			t.Errorf("%q: %v, want ErrBadDSN", dsn, err)
		}
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{"postgres://u:secret@h/db", "mysql://u:secret@tcp(h)/db", "redis://:secret@h/0?password=secret", "x://a:secret@@b", "%zz://u:secret@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		out := store.Redact(dsn)
		// Whatever the input, a password written as user:PASSWORD@ must not survive.
		if i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@"); i >= 0 && j > i {
			userinfo := dsn[i+3 : j]
			if k := strings.Index(userinfo, ":"); k >= 0 && len(userinfo[k+1:]) >= 4 && !strings.ContainsAny(userinfo[k+1:], "/?#[]") &&
				strings.Contains(out, ":"+userinfo[k+1:]+"@") {
				t.Fatalf("Redact(%q) = %q keeps the password", dsn, out)
			}
		}
		if _, err := store.Scheme(dsn); err != nil && !errors.Is(err, store.ErrBadDSN) {
			t.Fatalf("Scheme error does not wrap ErrBadDSN: %v", err)
		}
	})
}
