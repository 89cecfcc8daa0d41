package store_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/once-run/once/store"
)

func TestCheckText(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"", true},
		{"line one\nline two\tend", true},
		{strings.Repeat("é", store.MaxNoteLen/2), true},        // exactly the limit in 2-byte characters
		{strings.Repeat("é", store.MaxNoteLen/2) + "x", false}, // one byte over
		{strings.Repeat("x", store.MaxNoteLen+1), false},
		{"bad \xff byte", false},
		{"nul \x00 byte", false},
	} {
		err := store.CheckText("--note", c.s, store.MaxNoteLen)
		if (err == nil) != c.ok {
			t.Errorf("CheckText(%.20q…): %v, want ok=%v", c.s, err, c.ok)
		}
		if err != nil && (!errors.Is(err, store.ErrInvalid) || !strings.HasPrefix(err.Error(), "--note ") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("CheckText(%.20q…): error %q does not wrap ErrInvalid, name the flag, in one line", c.s, err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"db1:4121", true},
		{"drill-1/ホスト:12", true},
		{strings.Repeat("€", store.MaxHolderLen/3), true}, // 255 bytes of 3-byte characters
		{strings.Repeat("€", store.MaxHolderLen/3) + "x", false},
		{"", false},
		{"evil\x1b]0;pwned\x07", false},
		{"clear\x1b[2J", false},
		{"two\nlines", false},
		{"tab\there", false},
		{"c1\u009b31m", false},
		{"bidi\u202egnp.exe", false},
		{"del\x7f", false},
		{"bad\xc3", false},
	} {
		err := store.CheckName("--holder", c.s, store.MaxHolderLen)
		if (err == nil) != c.ok {
			t.Errorf("CheckName(%q): %v, want ok=%v", c.s, err, c.ok)
		}
		if err != nil && (!errors.Is(err, store.ErrInvalid) || strings.ContainsAny(err.Error(), "\n\x1b\x07\x7f")) {
			t.Errorf("CheckName(%q): error %q must wrap ErrInvalid and be one clean line", c.s, err)
		}
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("日本", 3000) // 18,000 bytes
	for _, c := range []struct {
		s   string
		max int
	}{
		{"short", 10}, {long, store.MaxNoteLen}, {"a\xffb\x00c", 100}, {long, 4}, {long, 2},
	} {
		got := store.Clip(c.s, c.max)
		if err := store.CheckText("clip", got, c.max); err != nil {
			t.Errorf("Clip(%.10q, %d) = %.10q: %v", c.s, c.max, got, err)
		}
		if len(c.s) > c.max && c.max >= 3 && !strings.HasSuffix(got, "…") {
			t.Errorf("Clip(%.10q, %d) = %.10q: a cut text ends with …", c.s, c.max, got)
		}
	}
	if got := store.Clip("fits", 4); got != "fits" {
		t.Errorf("Clip kept %q", got)
	}
}

func FuzzLimits(f *testing.F) {
	for _, s := range []string{"", "db1:1", "\x1b[2J", "日本語", "a\xffb", strings.Repeat("é", 200), "\u202e"} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		c := store.Clip(s, max)
		if store.CheckText("x", c, max) != nil || len(c) > max {
			t.Fatalf("Clip(%q, %d) = %q is not storable", s, max, c)
		}
		if store.CheckName("x", s, max) == nil {
			if s == "" || len(s) > max || !utf8.ValidString(s) {
				t.Fatalf("CheckName accepted %q (max %d)", s, max)
			}
			for _, r := range s {
				if !store.Printable(r) {
					t.Fatalf("CheckName accepted %q with %U", s, r)
				}
			}
		}
	})
}

// IsRedacted recognises every DSN Redact hides a password in, and no DSN it leaves alone.
func TestIsRedacted(t *testing.T) {
	for _, dsn := range []string{
		"postgres://once:s3cret@db:5432/once?sslmode=disable",
		"mysql://once:pw@127.0.0.1:3306/once",
		"redis://:pw@127.0.0.1:6379/0",
		"postgres://db/once?password=pw",
	} {
		r := store.Redact(dsn)
		if r == dsn || !store.IsRedacted(r) {
			t.Errorf("Redact(%s) = %s: IsRedacted = false", dsn, r)
		}
		if store.IsRedacted(dsn) {
			t.Errorf("IsRedacted(%s) = true for a DSN with its password", dsn)
		}
	}
	for _, dsn := range []string{"sqlite:///var/lib/once/once.db", "redis://127.0.0.1:6379/0?prefix=xxxxx", "etcd://a:2379,b:2379", "zk://h:2181", "postgres://once@db/once"} {
		if store.IsRedacted(dsn) || store.IsRedacted(store.Redact(dsn)) {
			t.Errorf("IsRedacted(%s) = true for a DSN without a password", dsn)
		}
	}
	if !store.IsRedacted("host=db user=once password=xxxxx") || store.IsRedacted("host=db user=xxxxx") {
		t.Error("a key=value DSN with the redacted password is not recognised")
	}
}
