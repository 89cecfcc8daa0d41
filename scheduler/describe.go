package scheduler

import (
	"context"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// JobInfo is what the fleet knows of one job now (once jobs).
type JobInfo struct {
	Name     string       `json:"name"`
	Schedule string       `json:"schedule"`
	TZ       string       `json:"tz,omitempty"`
	Next     []time.Time  `json:"next"`              // the next fire times, jitter included
	Paused   *store.Key   `json:"paused,omitempty"`  // the pause in force: who and why (RunID), since (ClaimedAt)
	Trigger  string       `json:"trigger,omitempty"` // the slot of a trigger request waiting to run
	Running  *store.Lease `json:"running,omitempty"` // the lease held now: which node runs it (with a limit: the oldest seat)
	// Holders is how many grants of the job are live: 1 for its lease, up to its limit for seats.
	Holders int `json:"holders,omitempty"`
	// Last is the job's newest attempt, nil when it never ran (among its newest history entries).
	Last   *store.Attempt `json:"last,omitempty"`
	Source string         `json:"source,omitempty"`
}

// NextFires is when job j fires next after now, n times, jitter included (none when its schedule
// does not parse). It reads nothing.
func NextFires(j Job, now time.Time, n int) []time.Time {
	var out []time.Time
	if sp, err := j.Spec(); err == nil {
		for sl := nextFire(j.Name, sp, j.Jitter, now); sl.Value != "" && len(out) < n; sl = sp.Next(sl.Start) {
			out = append(out, fireTime(j.Name, sl, j.Jitter))
		}
	}
	return out
}

// Describe reads what the store knows of jobs: next fire times after now (n of them), pauses,
// triggers waiting, the lease held, and each job's newest attempt. It costs a Leases call, two
// reads of the control requests (Paused, Triggered: a page of each scope, or look-ups of the
// names) and one short history read per job.
func Describe(ctx context.Context, s store.Store, jobs []Job, now time.Time, n int) ([]JobInfo, error) {
	names := make([]string, len(jobs))
	for i, j := range jobs {
		names[i] = j.Name
	}
	leases, err := s.Leases(ctx)
	if err != nil {
		return nil, err
	}
	held, holders := map[string]store.Lease{}, map[string]int{}
	for _, l := range leases {
		if h, ok := held[l.Task]; !ok || l.Token < h.Token {
			held[l.Task] = l
		}
		holders[l.Task]++
	}
	paused, err := Paused(ctx, s, names)
	if err != nil {
		return nil, err
	}
	trig, err := Triggered(ctx, s, names)
	if err != nil {
		return nil, err
	}
	out := make([]JobInfo, len(jobs))
	for i, j := range jobs {
		ji := JobInfo{Name: j.Name, Schedule: j.Schedule, TZ: j.TZ, Source: j.Source, Next: NextFires(j, now, n)}
		if k, ok := paused[j.Name]; ok {
			ji.Paused = &k
		}
		if k, ok := trig[j.Name]; ok {
			ji.Trigger = strings.TrimPrefix(k.RunID, triggerPrefix)
		}
		if l, ok := held[j.Name]; ok {
			ji.Running, ji.Holders = &l, holders[j.Name]
		}
		if ji.Last, err = LastAttempt(ctx, s, j.Name); err != nil {
			return nil, err
		}
		out[i] = ji
	}
	return out, nil
}

// LastAttempt is task's newest attempt among its newest history entries (events such as busy or
// skipped come between attempts), nil when there is none.
func LastAttempt(ctx context.Context, s store.Store, task string) (*store.Attempt, error) {
	h, err := s.History(ctx, store.HistoryQuery{Task: task, Limit: 50})
	if err != nil {
		return nil, err
	}
	for _, e := range h {
		if e.State.IsAttempt() {
			a := e.Attempt
			return &a, nil
		}
	}
	return nil, nil
}
