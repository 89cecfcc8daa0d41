package main

import (
	"os"
	"strings"
	"testing"
	"time"
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
		for _, slot := range [][]string{{"--per", "day"}, {"--schedule", "0 0 * * *"}, {"--schedule", "@every 1h"}, {"--per", "day", "--tz", "Local"}} {
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
	for i, tz := range []string{":Europe/Berlin", "Asia/Tokyo", "UTC", "UTC0", "UTC+0", "GMT-0", ""} {
		if r := withTZ(tz, "run", "--task", "tz-good-"+string(rune('a'+i)), "--per", "hour", "--", "true"); r.code != 0 {
			t.Errorf("TZ=%q: exit %d %s", tz, r.code, r.stderr)
		}
	}
}

// TestDaemonCheckEnvTZ: a jobs file's job without tz under a TZ Go cannot read is refused with its
// file:line, as once run's --per is, not scheduled in UTC.
func TestDaemonCheckEnvTZ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	jobs := t.TempDir() + "/jobs.toml"
	if err := os.WriteFile(jobs, []byte("[[job]]\nname = \"tzj\"\nschedule = \"0 2 * * *\"\ncommand = [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.vars = append(e.vars, "TZ=Europe/Berln")
	r := e.run("daemon", "--check", jobs)
	if r.code != 64 || !strings.Contains(r.stderr, jobs+":1: TZ=\"Europe/Berln\" names no zone") {
		t.Errorf("daemon --check under TZ=Europe/Berln: exit %d, stderr %q; want 64 naming the job's line and TZ", r.code, r.stderr)
	}
	e.vars[len(e.vars)-1] = "TZ=Europe/Berlin"
	if r := e.run("daemon", "--check", jobs); r.code != 0 || !strings.Contains(r.stdout, "+01:00") && !strings.Contains(r.stdout, "+02:00") {
		t.Errorf("daemon --check under TZ=Europe/Berlin: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestEnvTZOlderOnceSlotsKept: an older once took a TZ Go cannot read as UTC and named its slots
// so. Upgraded, the 64 said "give --tz ZONE": the zone meant names the same instant of an hourly
// schedule anew (06:00+01:00 for 05:00+00:00), so the hour it had run ran again, here and on every
// host of the fleet still on the older once. The 64 says what keeps its slots: --tz UTC finds
// the slot done.
func TestEnvTZOlderOnceSlotsKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sched := []string{"run", "--task", "tz-older", "--schedule", "0 * * * *"}
	if now := time.Now(); now.Minute() == 59 && now.Second() >= 45 {
		time.Sleep(20 * time.Second) // the three runs in one hour's slot
	}
	hour := time.Now().Truncate(time.Hour)
	// The older once's run: the current hour's slot, named in UTC.
	if r := e.run(append(sched, "--tz", "UTC", "--", "echo", "ran")...); r.code != 0 || r.stdout != "ran\n" {
		t.Fatalf("seeding: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	saved := e.vars
	e.vars = append(append([]string{}, saved...), "TZ=CET-1CEST,M3.5.0,M10.5.0/3")
	r := e.run(append(sched, "--", "echo", "ran again")...)
	e.vars = saved
	if r.code != 64 || !strings.Contains(r.stderr, "an older once took it as UTC: --tz UTC keeps the slots it named") {
		t.Fatalf("upgraded: exit %d %s; want 64 offering --tz UTC", r.code, r.stderr)
	}
	if r := e.run(append(sched, "--tz", "UTC", "--", "echo", "ran again")...); r.code != 0 || r.stdout != "" {
		if !time.Now().Truncate(time.Hour).Equal(hour) {
			t.Skip("the hour turned during the test (a loaded machine): its slot is another")
		}
		t.Fatalf("--tz UTC: exit %d %q %s; want the hour found done", r.code, r.stdout, r.stderr)
	}
}
