package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad input, in process: every refusal is exit 64 with one line that names what was wrong, and the
// ledger is never created for it. (cmd/once's e2e tests cover the same through the real binary; this
// table is the fast, complete list.)
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // a part of the one line printed
	}{
		{[]string{"run", "--task", "t", "--ttl", "0", "--", "true"}, "--ttl 0s is too short"},
		{[]string{"run", "--task", "t", "--ttl", "999999h", "--", "true"}, "longer than the maximum, 24h"},
		{[]string{"run", "--task", "", "--", "true"}, "--task is given but empty"},
		{[]string{"run", "--task", "t", "--per", "bogus", "--", "true"}, `--per "bogus"`},
		{[]string{"run", "--task", "t", "--store", "", "--", "true"}, "--store is given but empty"},
		{[]string{"run", "--task", "t", "--slot", "", "--", "true"}, "--slot is given but empty"},
		{[]string{"run", "--task", "t"}, "missing command"},
		{[]string{"run", "--task", "t", "--on-unknown", "maybe", "--", "true"}, `--on-unknown "maybe"`},
		{[]string{"run", "--task", "t", "--max-attempts", "-1", "--", "true"}, "--max-attempts -1 is out of range: give 0 (no limit) to 1000"},
		{[]string{"run", "--task", "t", "--max-attempts", "1001", "--", "true"}, "--max-attempts 1001 is out of range: give 0 (no limit) to 1000"},
		{[]string{"run", "--task", "t", "--grace", "-1s", "--", "true"}, "-1s is negative"},
		{[]string{"run", "--task", "t", "--catch-up", "99999d", "--", "true"}, `--catch-up "99999d"`},
		{[]string{"run", "--task", "t", "--tz", "Mars/Base", "--", "true"}, "unknown time zone"},
		{[]string{"run", "--task", "t", "--schedule", "61 * * * *", "--", "true"}, "--schedule"},
		{[]string{"run", "--task", "a b", "--", "true"}, "has ' ' at byte 1"},
		{[]string{"run", "--task", "t", "--log-level", "loud", "--", "true"}, `--log-level "loud"`},
		{[]string{"run", "--task", "t", "--store", "redis://x/0?prefix=A;b", "--", "true"}, `"prefix"`},
		{[]string{"run", "--task", "t", "--store", "postgres://h/db?bogus=1", "--", "true"}, `"bogus"`},
		{[]string{"run", "--task", "t", "--store", "nosuch://x", "--", "true"}, "nosuch"},
		{[]string{"history", "--task", "t", "--limit", "-1"}, "--limit -1 is negative"},
		{[]string{"help", "nosuch"}, `unknown help topic "nosuch"`},
		{[]string{"help", "keys", "clam"}, `unknown help topic "keys clam"`},
		{[]string{"history", "--task", "t", "--before", "zzz"}, "history cursor"},
		{[]string{"history", "--kind", "done"}, `--kind: history kind "done": give an attempt state (running, succeeded, failed, unknown) or an event kind (skipped, busy, review, missed)`},
		{[]string{"history", "--kind", "Missed"}, `history kind "Missed"`},
		{[]string{"resolve", "--task", "t", "--slot", "s", "--as", "maybe"}, `--as "maybe"`},
		{[]string{"backfill", "--task", "t", "--from", "2026-01-01", "--to", "2025-01-01", "--", "true"}, "needs --per or --schedule"},
		{[]string{"prune", "--older-than", "0"}, "--older-than"},
		{[]string{"status", "--bogus"}, "unknown flag: --bogus (see 'once status --help')"},
		{[]string{"--bogus"}, "unknown flag: --bogus (see 'once --help')"}, // was "once once --help"
		{[]string{"keys", "claim", "--bogus"}, "(see 'once keys claim --help')"},
		{[]string{"effect", "--scope", "", "--key", "k", "--", "true"}, "--scope is given but empty"},
		{[]string{"nosuchcommand"}, "nosuchcommand"},
		// A flag swallowed as the value of the one before it ("--slot $BATCH --replace", BATCH unset).
		{[]string{"run", "--task", "t", "--slot", "--replace", "--", "true"}, "--slot took --replace as its value"},
		{[]string{"run", "--task", "--replace", "--", "true"}, "--task took --replace as its value"},
		{[]string{"run", "--task", "t", "--slot", "-v", "--", "true"}, "--slot took -v as its value"},
		{[]string{"run", "--task", "t", "--slot", "--", "true"}, "--slot took -- as its value"},
		{[]string{"run", "--task", "t", "--slot", "--", "--", "true"}, "--slot took -- as its value"},
		{[]string{"run", "--task", "--", "--", "true"}, "--task took -- as its value"},
		{[]string{"run", "--task", "t", "--per", "--wait=5s", "--", "true"}, "--per took --wait=5s as its value"},
		{[]string{"run", "--task", "t", "--max-attempts=", "--", "true"}, "--max-attempts is given but empty"},
		{[]string{"history", "--limit="}, "--limit is given but empty"},
		// Whole numbers are decimal: pflag read 010 as octal 8, 0x10 as 16, 1_0 as 10.
		{[]string{"run", "--task", "t", "--busy-exit", "010", "--", "true"}, `--busy-exit "010" has a leading 0`},
		{[]string{"run", "--task", "t", "--max-attempts", "0x10", "--", "true"}, `--max-attempts "0x10" is not a whole number`},
		{[]string{"run", "--task", "t", "--limit", "1_0", "--", "true"}, `--limit "1_0" is not a whole number`},
		{[]string{"history", "--limit", "99999999999999999999"}, "--limit 99999999999999999999 is out of range"},
		{[]string{"run", "--task", "t", "--ttl", "9999999999999h", "--", "true"}, "--ttl 9999999999999h is longer than the maximum, 24h"},
		{[]string{"run", "--task", "t", "--ttl", "s", "--", "true"}, `--ttl "s" is not a duration`},
		// An age of what to delete or forget in minutes: m is minutes, not months.
		{[]string{"prune", "--older-than", "6m", "--forget-slots"}, `--older-than "6m" is in minutes or seconds (m is minutes, not months)`},
		{[]string{"prune", "--older-than", "30s"}, "for 30s itself write 0h30s"},
		{[]string{"run", "--task", "t", "--retain", "3m", "--", "true"}, `--retain "3m" is in minutes`},
		{[]string{"keys", "forget", "--scope", "s", "--older-than", "6m", "--include-done"}, "such as 2160h"},
		{[]string{"keys", "forget", "--scope", "s", "--older-than", "90d"}, `--older-than "90d": give hours here, such as 2160h`},
		{[]string{"keys", "forget", "--scope", "s", "--older-than", "-1h"}, `--older-than "-1h": give a positive age in hours, such as 720h`},
		{[]string{"keys", "forget", "--scope", "s", "--older-than", "3mo"}, `--older-than "3mo": give a positive age in hours`},
		// The daemon's own records: a slot marked recorded by hand was never run.
		{[]string{"keys", "claim", "--scope", "once.scheduler.recorded", "queued j 2026-01-01T00:00:00Z"}, "once daemon's own records"},
		{[]string{"keys", "forget", "--scope", "once.scheduler.paused", "--older-than", "1h"}, "once daemon's own records"},
		{[]string{"keys", "done", "--scope", "once.scheduler.recorded", "k"}, "once daemon's own records"},
		{[]string{"effect", "--scope", "once.scheduler.x", "--key", "k", "--", "true"}, "once daemon's own records"},
		// A typo'd command below the root: cobra printed the help and exited 0.
		{[]string{"keys", "forgt"}, `unknown command "forgt" for "once keys": did you mean forget?`},
		{[]string{"keys", "clam", "k1"}, `unknown command "clam" for "once keys"`},
		{[]string{"completion", "bsh"}, `unknown command "bsh" for "once completion"`},
		// The daemon's durations that it would not honour.
		{[]string{"daemon", "--jobs", "/nonexistent/jobs.toml", "--poll", "0"}, "--poll 0s is too short: give at least 100ms"},
		{[]string{"daemon", "--jobs", "/nonexistent/jobs.toml", "--poll", "1ns"}, "--poll 1ns is too short"},
		{[]string{"daemon", "--jobs", "/nonexistent/jobs.toml", "--drain", "0"}, "--drain 0s would be the default, 5m"},
		{[]string{"daemon", "--jobs", "/nonexistent/jobs.toml", "--max-clock-offset", "0s"}, "--max-clock-offset 0s would be the default, 2s"},
		// A backfill reaching a slot that has not begun: run now, it would be skipped when it comes.
		{[]string{"backfill", "--task", "t", "--per", "day", "--tz", "UTC", "--from", "2020-01-01", "--to", "2999-01-01", "--", "true"}, "which has not begun"},
		{[]string{"backfill", "--task", "t", "--per", "day", "--tz", "UTC", "--from", "2020-01-01", "--to", "2020-01-02", "--max", "010", "--", "true"}, `--max "010" has a leading 0`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "home")
			t.Setenv("ONCE_HOME", home)
			for _, k := range []string{"ONCE_STORE", "ONCE_STORE_PASSWORD_FILE", "ONCE_LOG_LEVEL", "ONCE_LOG_FILE"} {
				t.Setenv(k, "") // restored after the test
				os.Unsetenv(k)
			}
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), c.args, strings.NewReader(""), &stdout, &stderr)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, ExitUsage, stderr.String())
			}
			msg := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "once: ") {
				t.Errorf("want one line starting with %q, got %q", "once: ", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %q does not say %q", msg, c.want)
			}
			if _, err := os.Stat(filepath.Join(home, "once.db")); err == nil {
				t.Errorf("a refused command created the ledger")
			}
		})
	}
}

// ONCE_HOME set but empty, or relative, would be another ledger (the default one, or one per
// working directory), where a done slot runs again: refused.
func TestOnceHomeEmptyOrRelative(t *testing.T) {
	for v, want := range map[string]string{"": "ONCE_HOME is set but empty", "state": "ONCE_HOME=state is relative"} {
		t.Setenv("ONCE_HOME", v)
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), []string{"run", "--task", "t", "--", "true"}, strings.NewReader(""), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("ONCE_HOME=%q: exit %d, %q; want 64 saying %q", v, code, stderr.String(), want)
		}
	}
}

// ONCE_HOME (or XDG_STATE_HOME) with a trailing space, a BOM or a control character was another
// directory, with its own ledger and locks: a slot already done ran again. Refused like such a DSN.
func TestOnceHomeUnseenCharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	for _, v := range []string{dir + " ", dir + "\t", dir + "\u00a0", "\ufeff" + dir, dir + "\u200b", dir + "\n1"} {
		t.Setenv("ONCE_HOME", v)
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), []string{"run", "--task", "t", "--per", "day", "--tz", "UTC", "--", "true"}, strings.NewReader(""), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), "another ledger") {
			t.Errorf("ONCE_HOME=%q: exit %d, %q; want 64 naming another ledger", v, code, stderr.String())
		}
		if _, err := os.Lstat(v); err == nil {
			t.Errorf("ONCE_HOME=%q: the directory was created", v)
		}
	}
	if os.Geteuid() == 0 {
		return // root's state is /var/lib/once, whatever XDG_STATE_HOME says
	}
	os.Unsetenv("ONCE_HOME")
	t.Setenv("XDG_STATE_HOME", dir+" ")
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"run", "--task", "t", "--", "true"}, strings.NewReader(""), &stdout, &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), "XDG_STATE_HOME") {
		t.Errorf("XDG_STATE_HOME with a trailing space: exit %d, %q; want 64", code, stderr.String())
	}
}

// A jobs file that others can change would let them run commands as the daemon's user: refused,
// like a drop-in of a directory, and a directory that others can write (where they could add one).
func TestJobsFileOthersCanWrite(t *testing.T) {
	t.Setenv("ONCE_HOME", filepath.Join(t.TempDir(), "home"))
	dir := t.TempDir()
	job := "[[job]]\nname = \"j\"\nschedule = \"@every 1m\"\ncommand = \"true\"\n"
	check := func(path, want string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), []string{"daemon", "--check", path}, strings.NewReader(""), &stdout, &stderr)
		if want == "" {
			if code != 0 {
				t.Fatalf("%s: exit %d, %s", path, code, stderr.String())
			}
			return
		}
		if code != ExitUsage || !strings.Contains(stderr.String(), want) {
			t.Fatalf("%s: exit %d, %q; want 64 saying %q", path, code, stderr.String(), want)
		}
	}
	file := filepath.Join(dir, "jobs.toml")
	if err := os.WriteFile(file, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	check(file, "")
	check(dir, "")
	os.Chmod(file, 0o664) // group-writable, even by this process's own group (shared on some systems)
	check(file, "chmod go-w")
	os.Chmod(file, 0o666)
	check(file, "chmod go-w")
	check(dir, "chmod go-w") // as a drop-in
	os.Chmod(file, 0o644)
	link := filepath.Join(dir, "b.toml") // a linked drop-in: jobfile's reason, not a chmod
	os.Symlink(file, link)
	check(dir, "is a symbolic link")
	os.Remove(link)
	os.Chmod(dir, 0o1777)
	check(dir, "can be written by group or others")
	os.Chmod(dir, 0o700)
}

// A set but empty ONCE_HOLDER, ONCE_NODE or ONCE_SERVE_TOKEN(_FILE) is refused, not taken as the
// default (an unset variable in a unit file made a read-only server, silently).
func TestEmptyEnvRefused(t *testing.T) {
	t.Setenv("ONCE_HOME", filepath.Join(t.TempDir(), "home"))
	for env, args := range map[string][]string{
		"ONCE_HOLDER":           {"run", "--task", "t", "--", "true"},
		"ONCE_NODE":             {"daemon", "--jobs", "/nonexistent.toml"},
		"ONCE_SERVE_TOKEN":      {"serve"},
		"ONCE_SERVE_TOKEN_FILE": {"serve"},
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "")
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			if code != ExitUsage || !strings.Contains(stderr.String(), env+" is set but empty") {
				t.Fatalf("exit %d, %q; want 64 naming %s", code, stderr.String(), env)
			}
		})
	}
}

// A pause of a job the store has never seen (a typo) says so on stderr, and still pauses it (a
// new job may be paused before its first run).
func TestPauseUnknownJobWarns(t *testing.T) {
	t.Setenv("ONCE_HOME", filepath.Join(t.TempDir(), "home"))
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"pause", "backpu"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "no job named backpu has run") || !strings.Contains(stdout.String(), "paused backpu") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// daemon --check warns (exit 0: the daemon's PATH and mounts may differ) about a command not in
// PATH and a dir that is not a directory here: at run time each is a slot recorded missed.
func TestDaemonCheckWarnsOfWhatCannotStart(t *testing.T) {
	t.Setenv("ONCE_HOME", filepath.Join(t.TempDir(), "home"))
	dir := t.TempDir()
	file := filepath.Join(dir, "jobs.toml")
	jobs := "[[job]]\nname = \"a\"\nschedule = \"@every 1m\"\ncommand = [\"/no/such/prog\"]\n" +
		"[[job]]\nname = \"b\"\nschedule = \"@every 1m\"\ndir = \"" + filepath.Join(dir, "gone") + "\"\ncommand = \"true\"\n" +
		"[[job]]\nname = \"c\"\nschedule = \"@every 1m\"\ndir = \"" + dir + "\"\ncommand = \"true\"\n"
	if err := os.WriteFile(file, []byte(jobs), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"daemon", "--check", file}, strings.NewReader(""), &stdout, &stderr)
	got := stderr.String()
	if code != 0 || !strings.Contains(got, "a: command /no/such/prog is not in this PATH") ||
		!strings.Contains(got, "b: dir "+filepath.Join(dir, "gone")+" is not a directory here") || strings.Contains(got, " c: ") {
		t.Errorf("exit %d, stderr %q: want 0 and a warning for a and b each, none for c", code, got)
	}
}

// Exit 69's "(nothing was run)" belongs to the commands that run something; a read or a resolve
// that cannot reach its store says only that.
func TestUnavailableSaysNothingWasRunOnlyForRunners(t *testing.T) {
	t.Setenv("ONCE_HOME", t.TempDir())
	dsn := "redis://127.0.0.1:1" // nothing listens on port 1: refused at once
	for _, c := range []struct {
		args   []string
		notRun bool
	}{
		{[]string{"run", "--task", "t", "--store", dsn, "--", "true"}, true},
		{[]string{"backfill", "--task", "t", "--per", "day", "--tz", "UTC", "--from", "2026-01-01", "--to", "2026-01-02", "--store", dsn, "--", "true"}, true},
		{[]string{"history", "--store", dsn}, false},
		{[]string{"status", "--store", dsn}, false},
		{[]string{"resolve", "--task", "t", "--slot", "s", "--as", "succeeded", "--by", "me", "--store", dsn}, false},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), c.args, strings.NewReader(""), &stdout, &stderr)
		if code != ExitUnavailable || strings.Contains(stderr.String(), "nothing was run") != c.notRun {
			t.Errorf("once %s: exit %d, %q; want 69, %q said: %v", c.args[0], code, stderr.String(), notRunTail, c.notRun)
		}
	}
}
