package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]time.Duration{"6h": 6 * time.Hour, "3d": 72 * time.Hour, "1d12h": 36 * time.Hour, "2w": 14 * 24 * time.Hour, "1w1d": 8 * 24 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseWindow(in); err != nil || got != want {
			t.Errorf("parseWindow(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0s", "-1h", "d", "1x", "1d-2h", "+1d", "1d2w", "99999w", "3"} {
		if _, err := parseWindow(in); err == nil {
			t.Errorf("parseWindow(%q) accepted", in)
		} else if code, _ := classify(err); code != ExitUsage {
			t.Errorf("parseWindow(%q): exit %d, want %d", in, code, ExitUsage)
		}
	}
}

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"6h", "3d", "1d12h", "2w", "1w1d", "-1h", "5000w", "1d1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseWindow(s)
		if err != nil {
			if code, msg := classify(err); code != ExitUsage || strings.Contains(msg, "\n") {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if d <= 0 || d > maxWindow {
			t.Fatalf("parseWindow(%q) = %v", s, d)
		}
	})
}
