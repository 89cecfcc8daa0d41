package cli

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/once-run/once/store"
)

// durationFlag is a time.Duration flag whose parse error says how to write one. A bare number is
// refused rather than guessed at: "--ttl 5" could mean seconds (flock) or nanoseconds (Go).
// Negative durations and durations above max are refused too.
type durationFlag struct {
	d   *time.Duration
	max time.Duration
}

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("%q has no unit: write %ss for seconds, or use m, h, ms", s, s)
		}
		if durationShape.MatchString(s) { // well formed, too long for Go's durations (about 290 years)
			return fmt.Errorf("%s is longer than the maximum, %s", s, fmtMax(f.max))
		}
		return fmt.Errorf("%q is not a duration: write it like 30s, 5m, 1h30m or 500ms", s)
	}
	if d < 0 {
		return fmt.Errorf("%s is negative: give a duration such as 30s, 5m or 1h", s)
	}
	if d > f.max {
		return fmt.Errorf("%s is longer than the maximum, %s", s, fmtMax(f.max))
	}
	*f.d = d
	return nil
}

func (durationFlag) Type() string { return "duration" }

// durationShape is what time.ParseDuration reads; a value of this shape that it refuses overflowed.
// Each number has a digit before or after its point ("s", "h" and ".s" are not durations).
var durationShape = regexp.MustCompile(`^(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// durationVar defines a duration flag of at most max; its usage line states the maximum.
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, def, max time.Duration, usage string) {
	*p = def
	fs.Var(durationFlag{p, max}, name, usage+" (at most "+fmtMax(max)+")")
}

// fmtMax writes a maximum the way people say it: 24h, 7d, 10y.
func fmtMax(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= 365*day && d%(365*day) == 0:
		return strconv.Itoa(int(d/(365*day))) + "y (" + shortDur(d) + ")"
	case d > day && d%day == 0:
		return strconv.Itoa(int(d/day)) + "d (" + shortDur(d) + ")"
	}
	return shortDur(d)
}

// shortDur is d without zero minutes and seconds: 24h, 1h, 5m.
func shortDur(d time.Duration) string {
	s := d.String()
	for _, z := range []string{"0s", "0m"} {
		if len(s) > len(z) && s[len(s)-len(z):] == z && s[len(s)-len(z)-1] >= 'a' {
			s = s[:len(s)-len(z)]
		}
	}
	return s
}

// Maxima of the duration flags (docs/cli.md "Bounds"). A lease or a wait longer than a day is a
// typo or a misunderstanding: a holder that dies keeps its task blocked until its TTL runs out.
const (
	maxTTL           = 24 * time.Hour
	maxMinHold       = 24 * time.Hour
	maxWait          = 24 * time.Hour
	maxGrace         = time.Hour
	maxNotifyTimeout = 5 * time.Minute
	maxBurst         = 24 * time.Hour
	maxOffset        = time.Hour
	maxClaimTTL      = 7 * 24 * time.Hour
	maxOlderThan     = 10 * 365 * 24 * time.Hour
)

// emptyOK marks a string flag for which an explicitly empty value means something (documented
// in docs/cli.md); checkFlags lets it through.
const emptyOK = "once-empty-ok"

func allowEmpty(fs *pflag.FlagSet, name string) {
	_ = fs.SetAnnotation(name, emptyOK, []string{"true"})
}

// emptyHints says, per flag, what leaving it out means: the fix for an empty value.
var emptyHints = map[string]string{
	"store":    "give a DSN, or leave --store out to use $ONCE_STORE or the embedded store",
	"per":      "give day, hour, minute, week or month, or leave --per out to run without a slot",
	"schedule": `give a schedule such as "0 2 * * *", or leave --schedule out to run without a slot`,
	"slot":     "give a slot value, or leave --slot out to run without a slot",
	"tz":       "give a zone such as Europe/Berlin, or leave --tz out for local time",
	"holder":   "give a name, or leave --holder out for user@hostname:pid",
	"notify":   "give a URL, or leave --notify out",
	"ping":     "give a URL, or leave --ping out",
	"kind":     "give an attempt state or an event kind (missed, say), or leave --kind out for every entry",

	"log-level": "give debug, info, warn or error, or leave --log-level out (info on a terminal, else warn)",
	"log-file":  "give a file or syslog, or leave --log-file out to log on stderr only",
}

// isFlagName reports whether v is one of c's flags as written on a command line (--name,
// --name=…, -x): "--slot $BATCH --replace" with BATCH unset gave --slot the value "--replace",
// and dropped the flag.
func isFlagName(c *cobra.Command, v string) bool {
	switch {
	case strings.HasPrefix(v, "--"):
		name, _, _ := strings.Cut(v[2:], "=")
		return name != "" && c.Flags().Lookup(name) != nil
	case len(v) >= 2 && v[0] == '-' && v[1] != '-':
		return c.Flags().ShorthandLookup(v[1:2]) != nil
	}
	return false
}

// checkFlags refuses, on every command, a string flag given with an empty value ("--store
// $DSN" with DSN unset in a crontab): taking it as absent would fall back to a default the user
// did not choose (the local store, no slot). It also refuses a --store whose password once
// itself hid (a DSN pasted from once's output).
func checkFlags(c *cobra.Command, args []string) error {
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i] // once's own flags only, not the command's
	}
	var err error
	c.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "string" {
			return
		}
		v := f.Value.String()
		switch {
		case v == "" && f.Annotations[emptyOK] == nil:
			hint := emptyHints[f.Name]
			if f.Name == "slot" && c.Name() != "run" {
				hint = "" // leaving it out means every slot (history), the newest (logs): said by --help
			}
			if hint == "" {
				hint = "give a value, or leave --" + f.Name + " out"
			}
			err = usage("--%s is given but empty (an unset variable?): %s", f.Name, hint)
		case v == "--":
			// "--slot $BATCH -- cmd" with BATCH unset: the command then reads as misplaced.
			err = usage("--%s took -- as its value, the mark before the command (an unset variable before it?); give --%s a value, or leave it out",
				f.Name, f.Name)
		case isFlagName(c, v) && !slices.Contains(args, "--"+f.Name+"="+v):
			// Written --task=--as, the value is meant: no unset variable shifts a flag into it.
			err = usage("--%s took %s as its value: a flag of this command (an unset variable before it?); give --%s a value, or leave it out",
				f.Name, shellQuote(v), f.Name)
		case f.Name == "store" && store.IsRedacted(v):
			err = usage("--store %s: once hid this DSN's password (%s): write the password in its place, or set ONCE_STORE to the DSN and leave --store out",
				shellQuote(v), store.RedactedPassword)
		}
	})
	return err
}
