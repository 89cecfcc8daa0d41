package cli

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// What shellQuote returns, read back by a real sh, is the string itself.
func TestShellQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a b", "it's", `"$(rm -rf /)"`, "a|b", "x;y", "ü日", "--as", "`id`", "a\\b", "!", "*"} {
		out, err := exec.Command("sh", "-c", `printf %s `+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) = %s: sh read %q (%v)", s, shellQuote(s), out, err)
		}
	}
	if shellQuote("nightly-sync") != "nightly-sync" || shellQuote("2026-11-29T02:00:00+08:00") != "2026-11-29T02:00:00+08:00" {
		t.Error("plain names and slot values are not quoted")
	}
}

func FuzzShellQuote(f *testing.F) {
	for _, s := range []string{"", "a b", "'", "a'b'c", "$x", "\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := shellQuote(s)
		// Either untouched and made of safe characters, or one single-quoted word in which
		// every ' of s is closed, escaped and reopened.
		if q == s {
			if s == "" || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-=+,") != "" {
				t.Fatalf("%q left unquoted", s)
			}
			return
		}
		if !strings.HasPrefix(q, "'") || !strings.HasSuffix(q, "'") || strings.ReplaceAll(q[1:len(q)-1], `'\''`, "'") != s {
			t.Fatalf("shellQuote(%q) = %q", s, q)
		}
	})
}

func TestFmtMax(t *testing.T) {
	for _, c := range []struct {
		d    string
		want string
	}{{"24h", "24h"}, {"1h", "1h"}, {"5m", "5m"}, {"168h", "7d (168h)"}, {"87600h", "10y (87600h)"}, {"90s", "1m30s"}} {
		d, _ := time.ParseDuration(c.d)
		if got := fmtMax(d); got != c.want {
			t.Errorf("fmtMax(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}
