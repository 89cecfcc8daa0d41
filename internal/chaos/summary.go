package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Summary aggregates the outcomes of one store: counts summed over trials (Lost, NotLinearizable,
// LeaseLost, Blocked and Failed count trials), and the measured durations for percentiles (Margin:
// the faulted command's death to the next entry, pause>ttl excluded).
type Summary struct {
	Store                                     string
	Trials                                    int
	ByFault                                   map[Fault]int
	Overlaps, Excused, StaleAccepted, Lost    int
	TokenOrder, ReviewBroken, NotLinearizable int
	Takeover, StaleStop, Margin               []time.Duration
	LeaseLost, Blocked                        int
	Escaped                                   int // escapers alive when their once exited
	Failed                                    int
	Aborted                                   int // trials ended before the fault (not in Trials)
}

// Add counts an outcome.
func (s *Summary) Add(o Outcome) {
	if s.ByFault == nil {
		s.ByFault = map[Fault]int{}
	}
	s.Store = o.Store
	if o.Aborted != "" {
		s.Aborted++
		return
	}
	s.Trials++
	s.ByFault[o.Fault]++
	s.Overlaps += o.Overlaps
	s.Excused += o.Excused
	s.StaleAccepted += o.StaleAccepted
	s.TokenOrder += o.TokenOrder
	s.ReviewBroken += o.ReviewBroken
	if o.Lost {
		s.Lost++
	}
	if !o.Linearizable {
		s.NotLinearizable++
	}
	if o.Takeover >= 0 {
		s.Takeover = append(s.Takeover, o.Takeover)
	}
	if o.StaleStop >= 0 {
		s.StaleStop = append(s.StaleStop, o.StaleStop)
	}
	if o.Blocked {
		s.Blocked++
	}
	s.Escaped += o.Escaped
	if o.LeaseLost {
		s.LeaseLost++
	}
	if o.HasMargin && o.Fault != FaultPauseLong {
		s.Margin = append(s.Margin, o.StopMargin)
	}
	if !o.OK() {
		s.Failed++
	}
}

// Percentile returns the p-th percentile (0–100) of ds, or -1 when empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1)*p/100 + 0.5)
	return s[i]
}

// String is the summary as the figures of issue 7, one store per block.
func (s *Summary) String() string {
	var b strings.Builder
	var kinds []string
	for f, n := range s.ByFault {
		kinds = append(kinds, fmt.Sprintf("%s=%d", f, n))
	}
	sort.Strings(kinds)
	d := func(x time.Duration) string {
		if x < 0 {
			return "n/a"
		}
		return x.Round(time.Millisecond).String()
	}
	fmt.Fprintf(&b, "store %s: trials %d (%s)\n", s.Store, s.Trials, strings.Join(kinds, " "))
	fmt.Fprintf(&b, "  overlaps %d (excused paused-stale %d), stale writes accepted %d, lost slots %d, token order violations %d, review violations %d, not linearizable %d, failed trials %d\n",
		s.Overlaps, s.Excused, s.StaleAccepted, s.Lost, s.TokenOrder, s.ReviewBroken, s.NotLinearizable, s.Failed)
	fmt.Fprintf(&b, "  takeover after kill -9 p50 %s p99 %s (n=%d); stale stop after wake p50 %s p99 %s (n=%d)\n",
		d(Percentile(s.Takeover, 50)), d(Percentile(s.Takeover, 99)), len(s.Takeover),
		d(Percentile(s.StaleStop, 50)), d(Percentile(s.StaleStop, 99)), len(s.StaleStop))
	fmt.Fprintf(&b, "  pause>ttl trials where nobody could take over during the pause: %d; trials aborted before the fault (first holder stopped before its command entered): %d\n", s.Blocked, s.Aborted)
	fmt.Fprintf(&b, "  faulted holder lost its lease in %d trials; faulted command dead before the next entry by min %s p50 %s (n=%d)\n",
		s.LeaseLost, d(Percentile(s.Margin, 0)), d(Percentile(s.Margin, 50)), len(s.Margin))
	fmt.Fprintf(&b, "  escapers alive when their once exited: %d\n", s.Escaped)
	return b.String()
}
