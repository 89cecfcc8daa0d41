package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// durationFlag is a time.Duration flag whose parse error says how to write one. A bare number is
// refused rather than guessed at: "--ttl 5" could mean seconds (flock) or nanoseconds (Go).
type durationFlag struct{ d *time.Duration }

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
		return fmt.Errorf("%q is not a duration: write it like 30s, 5m, 1h30m or 500ms", s)
	}
	*f.d = d
	return nil
}

func (durationFlag) Type() string { return "duration" }

func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationFlag{p}, name, usage)
}
