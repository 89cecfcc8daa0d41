package sqlstore

import (
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// A DSN's call_timeout: the default when absent, 0 for none, a Go duration from 1s to 24h; it is
// taken from the parameters, so the driver never sends it to the server as a setting.
func TestParseCallTimeout(t *testing.T) {
	for raw, want := range map[string]time.Duration{"": DefaultCallTimeout, "0": 0, "1s": time.Second, "90s": 90 * time.Second, "24h": 24 * time.Hour} {
		q := store.Params{"prefix": "x_"}
		if raw != "" {
			q["call_timeout"] = raw
		}
		got, err := ParseCallTimeout("postgres", q)
		if err != nil || got != want {
			t.Errorf("call_timeout=%q: %v, %v; want %v", raw, got, err, want)
		}
		if _, left := q["call_timeout"]; left || q["prefix"] != "x_" {
			t.Errorf("call_timeout=%q: parameters left %v; want call_timeout taken, the rest kept", raw, q)
		}
	}
	if got := shortDuration(time.Minute) + " " + shortDuration(time.Hour) + " " + shortDuration(90*time.Second); got != "1m 1h 1m30s" {
		t.Errorf("shortDuration: %s", got)
	}
}
