package cli

import (
	"os"
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

// The --store of a pasted line names the ledger the run used, from any working directory and in a
// login shell without the crontab's XDG_STATE_HOME.
func TestStoreNameForPasting(t *testing.T) {
	t.Setenv("ONCE_HOME", "")
	os.Unsetenv("ONCE_HOME")
	t.Setenv("ONCE_STORE", "")
	os.Unsetenv("ONCE_STORE")
	dir := t.TempDir()
	t.Chdir(dir)
	a := &app{storeFlag: "sqlite:./once.db"}
	if got, want := a.storeName("sqlite:./once.db"), "sqlite://"+dir+"/once.db"; got != want {
		t.Errorf("relative DSN: storeName = %q, want %q", got, want)
	}
	if os.Geteuid() == 0 {
		return // root's default ledger is /var/lib/once whatever XDG_STATE_HOME says
	}
	t.Setenv("XDG_STATE_HOME", dir)
	a = &app{}
	if got := a.storeName("sqlite://" + dir + "/once/once.db"); got == "" {
		t.Error("with XDG_STATE_HOME set, storeName is empty: the pasted line opens ~/.local/state/once")
	}
}
