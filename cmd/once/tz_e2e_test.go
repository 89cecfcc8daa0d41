package main

import (
	"strings"
	"testing"
)

// TestEnvTZOnceCannotReadExits64 is a crontab with a TZ= line that Go cannot load: a typo, or a
// POSIX rule that date(1) and cron read. Go then makes local time UTC without a word, and --per
// day named its days in UTC (a run at 00:30 in Berlin landed in yesterday's slot). once refuses
// it (64, nothing run) where the zone names the slot; --tz, an explicit --slot, or no slot at all
// do not need it, and TZ names Go can read (":Europe/Berlin", "UTC0", "" for UTC) work as before.
func TestEnvTZOnceCannotReadExits64(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withTZ := func(tz string, args ...string) result {
		t.Helper()
		saved := e.vars
		e.vars = append(append([]string{}, saved...), "TZ="+tz)
		defer func() { e.vars = saved }()
		return e.run(args...)
	}
	for i, tz := range []string{"Europe/Berln", "CET-1CEST,M3.5.0,M10.5.0/3"} {
		for _, slot := range [][]string{{"--per", "day"}, {"--schedule", "0 0 * * *"}, {"--schedule", "@every 1h"}} {
			task := "tz-bad-" + string(rune('a'+i))
			args := append(append([]string{"run", "--task", task}, slot...), "--", "echo", "ran")
			r := withTZ(tz, args...)
			if r.code != 64 || strings.Contains(r.stdout, "ran") {
				t.Errorf("TZ=%s once %v: exit %d, stdout %q; want 64 and nothing run", tz, slot, r.code, r.stdout)
			}
			if !strings.Contains(r.stderr, `TZ="`+tz+`" names no zone`) || !strings.Contains(r.stderr, "--tz") {
				t.Errorf("TZ=%s once %v: stderr %q; want the TZ named and --tz offered", tz, slot, r.stderr)
			}
		}
		if r := withTZ(tz, "run", "--task", "tz-flag", "--per", "day", "--tz", "Europe/Berlin", "--", "true"); r.code != 0 {
			t.Errorf("TZ=%s with --tz: exit %d %s", tz, r.code, r.stderr)
		}
		if r := withTZ(tz, "run", "--task", "tz-slot", "--slot", "s"+tz[:2], "--", "true"); r.code != 0 {
			t.Errorf("TZ=%s with --slot: exit %d %s", tz, r.code, r.stderr)
		}
		if r := withTZ(tz, "run", "--task", "tz-none", "--", "true"); r.code != 0 {
			t.Errorf("TZ=%s without a slot: exit %d %s", tz, r.code, r.stderr)
		}
	}
	for _, tz := range []string{":Europe/Berlin", "Asia/Tokyo", "UTC", "UTC0", ""} {
		if r := withTZ(tz, "run", "--task", "tz-good-"+strings.Trim(strings.ReplaceAll(tz, "/", "-"), ":"), "--per", "hour", "--", "true"); r.code != 0 {
			t.Errorf("TZ=%q: exit %d %s", tz, r.code, r.stderr)
		}
	}
}
