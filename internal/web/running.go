package web

import (
	"context"
	"strconv"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
)

// The attempts still recorded as running, with whether each holder's lease is live: once status's
// RUNNING (store.ReadRunning, the same read), so that an attempt whose holder died (kill -9, a host
// lost) and whose lease expired shows on the overview before the task's next run marks it unknown.

// Running is an attempt still recorded as running as the overview and /api/v1/running show it.
type Running struct {
	store.RunningNow
	// Resolve, when its holder's lease is gone and no grant of its task is live, is the once resolve
	// line per decision that settles the slot now (resolve marks the attempt unknown first).
	Resolve *notify.Resolve `json:"resolve,omitempty"`
}

// RunningSection is what the server shows of the attempts still running.
type RunningSection struct {
	Running []Running `json:"running"`
	// More is true when more attempts were running than store.MaxRunningList: those after the
	// last one listed, in the store's index order, are not shown.
	More bool `json:"more"`
	// Unlisted are the tasks whose running attempts the store could not list (an older once ran
	// them on a key-value store and they have not run since).
	Unlisted []string `json:"unlisted"`
	// Listed is false when the store cannot list the attempts running at all: nothing is shown.
	Listed bool `json:"listed"`
	// PasswordHidden is true when the resolve commands' --store lost its password to redaction.
	PasswordHidden bool `json:"password_hidden"`
	// Error is why the list could not be read this time (the overview is shown without it).
	Error string `json:"error,omitempty"`
}

// running reads the attempts still running (store.ReadRunning: bounded by store.MaxRunningList, one
// Leases, the list once more when a holder is gone, no read per attempt; never history) and
// returns the leases too.
func (s *Server) running(ctx context.Context) (RunningSection, []store.Lease, error) {
	rr, leases, err := store.ReadRunning(ctx, s.c.Store, store.MaxRunningList)
	if err != nil {
		return RunningSection{}, nil, err
	}
	sec := RunningSection{Running: make([]Running, 0, len(rr.Attempts)), More: rr.More, Unlisted: rr.Unlisted, Listed: rr.Listed}
	if sec.Unlisted == nil {
		sec.Unlisted = []string{}
	}
	for _, r := range rr.Attempts {
		x := Running{RunningNow: r}
		if r.Settleable() {
			x.Resolve = &notify.Resolve{Failed: shell.Resolve(r.Task, r.Slot, string(store.Failed), s.c.DSN),
				Succeeded: shell.Resolve(r.Task, r.Slot, string(store.Succeeded), s.c.DSN)}
			sec.PasswordHidden = s.pwHidden
		}
		sec.Running = append(sec.Running, x)
	}
	return sec, leases, nil
}

// goneKey names an attempt in gone's map.
func goneKey(task, slot, runID string, number int) string {
	return task + "\x00" + slot + "\x00" + runID + "\x00" + strconv.Itoa(number)
}

// gone is the attempts still running whose holder is gone, by goneKey (s.running's read: bounded
// by store.MaxRunningList, never history), for the timeline's bars and a slot's page. When the
// list cannot be read it is logged and none is marked: the page is shown without the marks.
func (s *Server) gone(ctx context.Context) map[string]Running {
	sec, _, err := s.running(ctx)
	if err != nil {
		s.c.Log.Warn("cannot list the attempts running: holder gone is not marked", "err", err)
		return nil
	}
	out := map[string]Running{}
	for _, r := range sec.Running {
		if r.Lease == store.LeaseGone {
			out[goneKey(r.Task, r.Slot, r.RunID, r.Number)] = r
		}
	}
	return out
}
