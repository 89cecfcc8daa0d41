package cli

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// strictCmd is a command with a flag of each kind strictFlags meets.
func strictCmd() (*cobra.Command, *string, *int, *bool, *int, *error) {
	var s string
	var n, v int
	var b bool
	var refused error
	c := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }, SilenceErrors: true, SilenceUsage: true}
	c.Flags().StringVar(&s, "name", "", "")
	c.Flags().IntVar(&n, "n", 0, "")
	c.Flags().BoolVar(&b, "json", false, "")
	c.Flags().CountVarP(&v, "verbose", "v", "")
	strictFlags(c, &refused)
	return c, &s, &n, &b, &v, &refused
}

// A flag given twice is its last value, as in every GNU tool: wrappers and aliases (alias
// once='once --store A', a cron line built from defaults plus the user's flags) depend on it. A
// whole number is decimal; signs are kept.
func TestStrictFlags(t *testing.T) {
	c, s, n, b, v, _ := strictCmd()
	c.SetArgs([]string{"--name", "a", "--name=b", "--n", "3", "--n", "4", "--json", "--json", "-v", "-v"})
	if err := c.Execute(); err != nil || *s != "b" || *n != 4 || !*b || *v != 2 {
		t.Fatalf("flags given twice: %v; name %q n %d json %v v %d, want the last values", err, *s, *n, *b, *v)
	}
	for arg, want := range map[string]int{"-5": -5, "+5": 5, "0": 0, "-0": 0, "10": 10} {
		c, _, n, _, _, _ := strictCmd()
		c.SetArgs([]string{"--n", arg})
		if err := c.Execute(); err != nil || *n != want {
			t.Errorf("--n %s: %v, %d, want %d", arg, err, *n, want)
		}
	}
	for _, args := range [][]string{{"--n", "010"}, {"--n", "0x1"}, {"--n", "1_0"}, {"--n", "+-1"}, {"--n", "99999999999999999999"}, {"--n", "1", "--n", "010"}} {
		c, _, _, _, _, refused := strictCmd()
		c.SetArgs(args)
		if err := c.Execute(); err == nil || *refused == nil || !strings.Contains(err.Error(), (*refused).Error()) {
			t.Errorf("%q: %v (refused %v), want a refusal", args, err, *refused)
		}
	}
}

// FuzzCheckDecimal: a number checkDecimal accepts means the same in base 10 and in the base 0
// pflag parses with (no octal, hex or underscore surprise), and fits 64 bits.
func FuzzCheckDecimal(f *testing.F) {
	for _, s := range []string{"0", "10", "-1", "+3", "010", "0x10", "0b1", "0o7", "1_0", "", "-", "99999999999999999999", "18446744073709551615", " 1", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := checkDecimal(s); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if d, err := strconv.ParseInt(s, 10, 64); err == nil {
			if z, err := strconv.ParseInt(s, 0, 64); err != nil || z != d {
				t.Fatalf("%q: base 10 %d, base 0 %d, %v", s, d, z, err)
			}
			return
		}
		d, err := strconv.ParseUint(s, 10, 64)
		if z, zerr := strconv.ParseUint(s, 0, 64); err != nil || zerr != nil || z != d {
			t.Fatalf("%q accepted: base 10 %d %v, base 0 %d %v", s, d, err, z, zerr)
		}
	})
}

// FuzzDurationFlag: a duration is kept only when Go reads it, it is within [0, max], and the error
// otherwise is one line.
func FuzzDurationFlag(f *testing.F) {
	for _, s := range []string{"0", "5", "1.5s", "-1s", "24h", "24h0m1s", "9999999999999h", "1h30m", "x", "", "1µs", "s", "h", ".s", "m5s", "1.s", "99999999999999μs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d time.Duration
		err := durationFlag{&d, maxTTL}.Set(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			// "too long" is said of a well-formed duration only: with every number made 1, Go reads it.
			if _, gerr := time.ParseDuration(s); gerr != nil && strings.Contains(err.Error(), "longer than the maximum") {
				if _, serr := time.ParseDuration(digitRuns.ReplaceAllString(s, "1")); serr != nil {
					t.Fatalf("%q, not a duration, said to be too long: %v", s, err)
				}
			}
			return
		}
		if g, gerr := time.ParseDuration(s); gerr != nil || g != d || d < 0 || d > maxTTL {
			t.Fatalf("%q accepted as %v (Go: %v, %v)", s, d, g, gerr)
		}
	})
}

var digitRuns = regexp.MustCompile(`[0-9]+`)

// FuzzAgeFlag: an age of what to delete is positive, at most maxWindow, and written with days,
// weeks or hours (never minutes alone: months to a person).
func FuzzAgeFlag(f *testing.F) {
	for _, s := range []string{"90d", "2w", "36h", "1d12h", "6m", "0h6m", "30s", "1h30m", "0", "-1d", "3660d", "1w2d3h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d time.Duration
		if err := (ageFlag{&d}).Set(s); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if d <= 0 || d > maxWindow || !strings.ContainsAny(s, "dwh") {
			t.Fatalf("%q accepted as %v", s, d)
		}
	})
}

// FuzzCheckProgress: an accepted --progress is DONE/TOTAL of decimal whole numbers, DONE ≤ TOTAL,
// within store.MaxProgressLen (leading zeros parse; the store would refuse the report).
func FuzzCheckProgress(f *testing.F) {
	for _, s := range []string{"1/2", "2/1", "0/0", "-1/3", "1/0x10", "1/2/3", "/", "1200/3000", strings.Repeat("0", 70) + "1/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := checkProgress(s); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		d, tot, _ := strings.Cut(s, "/")
		dn, err1 := strconv.ParseUint(d, 10, 64)
		tn, err2 := strconv.ParseUint(tot, 10, 64)
		if err1 != nil || err2 != nil || dn > tn || len(s) > store.MaxProgressLen {
			t.Fatalf("%q accepted", s)
		}
	})
}

// A backfill never runs a slot that has not begun at its start: run ahead of time, it would be
// skipped as done when it came. The current slot is in reach.
func TestBackfillRefusesSlotsNotBegun(t *testing.T) {
	day, _ := slot.New("day", "", "", "UTC")
	sched, _ := slot.New("", "0 12 * * *", "", "UTC")
	week, _ := slot.New("week", "", "", "Europe/Berlin")
	month, _ := slot.New("month", "", "", "America/New_York")
	dst, _ := slot.New("", "30 2 * * *", "", "Europe/Berlin") // 02:30 is skipped on 2026-03-29
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)      // a Sunday
	for _, c := range []struct {
		spec     slot.Spec
		from, to string
		now      time.Time
		ok       bool
	}{
		{day, "2026-12-01", "2026-12-06", now, true},                                                      // today has begun
		{day, "2026-12-01", "2026-12-07", now, false},                                                     // tomorrow has not
		{day, "2026-12-01", "2027-12-06", now, false},                                                     // a typo'd year
		{day, "2026-12-01", "2026-12-07", time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), true},             // begun this instant
		{day, "2026-12-01", "2026-12-07", time.Date(2026, 12, 6, 23, 59, 59, 999999999, time.UTC), false}, // a nanosecond early
		{sched, "2026-12-01", "2026-12-05", now, true},
		{sched, "2026-12-01", "2026-12-06", now, false}, // today's 12:00 has not come
		{sched, "2026-12-01", "2026-12-06T10:00:00Z", now, true},
		{week, "2026-W45", "2026-W49", now, true},                                           // the week of Monday 2026-11-30 has begun
		{week, "2026-W45", "2026-W50", now, false},                                          // Monday 7 December, Berlin, has not
		{week, "2026-W45", "2026-W50", time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC), true}, // it is Monday 00:00 in Berlin
		{month, "2026-01", "2026-12", now, true},
		{month, "2026-01", "2027-01", time.Date(2027, 1, 1, 3, 0, 0, 0, time.UTC), false}, // still December in New York
		{month, "2026-01", "2027-01", time.Date(2027, 1, 1, 5, 0, 0, 0, time.UTC), true},
		{dst, "2026-03-27", "2026-03-29", time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), true}, // 03:00 CEST: the skipped 02:30 fired at 03:00
		{dst, "2026-03-27", "2026-03-29", time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC), false},
	} {
		f := &backfillFlags{from: c.from, to: c.to, max: 1000}
		_, err := backfillSlots(f, c.spec, c.now)
		if (err == nil) != c.ok {
			t.Errorf("%s %s..%s at %s: %v, want ok %v", c.spec, c.from, c.to, c.now, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "has not begun") {
			t.Errorf("%s %s..%s: %v", c.spec, c.from, c.to, err)
		}
	}
}

// A command that groups others, given no argument, prints its help and exits 0, as before.
func TestGroupCommandWithoutArgs(t *testing.T) {
	for _, args := range [][]string{{"keys"}, {"completion"}} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != ExitOK || !strings.Contains(stdout.String(), "Available Commands") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}
