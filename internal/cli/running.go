package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
)

// running is an attempt still running as status lists it (store.ReadRunning).
type running struct {
	store.RunningNow
	// Resolve, when the lease is gone and no grant of the task is live (Settleable), is the once
	// resolve line per decision that settles the slot now (resolve marks the attempt unknown first).
	Resolve *notify.Resolve `json:"resolve,omitempty"`
}

// runningSection is what status shows of the attempts still running.
type runningSection struct {
	list     []running
	more     bool     // the store had more than store.MaxRunningList
	unlisted []string // tasks whose running attempts the store could not list
	listed   bool     // the store is a store.RunningLister
	pwNote   string   // a.hiddenPassword's line for the resolve commands, or ""
}

// readRunning lists the attempts still running (store.ReadRunning, shared with once serve) with
// the resolve commands of those whose holder is gone. It returns the leases too, for status's LEASES.
func (a *app) readRunning(ctx context.Context, s store.Store, dsn string) (runningSection, []store.Lease, error) {
	sec := runningSection{pwNote: a.hiddenPassword(dsn)}
	rr, leases, err := store.ReadRunning(ctx, s, store.MaxRunningList)
	if err != nil {
		return sec, nil, err
	}
	sec.listed, sec.more, sec.unlisted = rr.Listed, rr.More, rr.Unlisted
	sec.list = make([]running, 0, len(rr.Attempts))
	for _, r := range rr.Attempts {
		x := running{RunningNow: r}
		if r.Settleable() {
			x.Resolve = a.resolveCommands(dsn, r.Task, r.Slot)
		}
		sec.list = append(sec.list, x)
	}
	return sec, leases, nil
}

// printRunning writes status's RUNNING section: the table, then for each attempt whose lease is
// gone what happened and the commands that settle it now.
func (a *app) printRunning(sec runningSection) error {
	if !sec.listed {
		fmt.Fprintf(a.stdout, "\nRUNNING: this store cannot list the attempts running; once doctor finds those whose holder is gone\n")
		return nil
	}
	count := fmt.Sprint(len(sec.list))
	if sec.more {
		count = fmt.Sprintf("the first %d of the store's index; more are running", len(sec.list))
	}
	fmt.Fprintf(a.stdout, "\nRUNNING (%s)\n", count)
	if len(sec.list) > 0 {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tSLOT\tATTEMPT\tHOLDER\tRUN ID\tTOKEN\tSTARTED\tLEASE")
		for _, r := range sec.list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", cell(r.Task), cell(dash(r.Slot)), r.Number, cell(r.Holder),
				cell(dash(r.RunID)), r.Token, fmtTime(r.StartedAt), r.Lease)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	gone := 0
	for _, r := range sec.list {
		if r.Lease != store.LeaseGone {
			continue
		}
		if r.HeldBy != nil {
			fmt.Fprintf(a.stdout, "\ntask %s slot %s: attempt %d is still recorded as running but its holder's lease is gone: the holder died or was cut off; task %s is held now (holder %s, token %d), so once resolve refuses it (75) until no grant of the task is live; the task's next run marks it unknown\n",
				cell(r.Task), cell(dash(r.Slot)), r.Number, cell(r.Task), cell(r.HeldBy.Holder), r.HeldBy.Token)
			continue
		}
		gone++
		fmt.Fprintf(a.stdout, "\ntask %s slot %s: attempt %d is still recorded as running but its holder's lease is gone: the holder died or was cut off; the next run of task %s marks it unknown and the slot then waits for review. To settle it now, run it again (add --note TEXT to say why):\n  %s\nor mark it done:\n  %s\n",
			cell(r.Task), cell(dash(r.Slot)), r.Number, cell(r.Task), r.Resolve.Failed, r.Resolve.Succeeded)
	}
	if sec.pwNote != "" && gone > 0 {
		fmt.Fprintf(a.stdout, "%s\n", sec.pwNote)
	}
	if len(sec.unlisted) > 0 {
		names := make([]string, len(sec.unlisted))
		for i, t := range sec.unlisted {
			names[i] = cell(t)
		}
		fmt.Fprintf(a.stdout, "not listed: the attempts running in task %s (an older once ran it and it has not run since; its next run indexes them; once doctor scans history for them)\n",
			strings.Join(names, ", "))
	}
	return nil
}

// resolveGoneWait bounds how long resolveGone waits for a store to let go of a grant that has
// expired (store.Leases no longer lists it) but still holds the task's lease.
const resolveGoneWait = 3 * time.Second

// resolveGone settles a slot whose last attempt is still recorded as running although its holder's
// grant is gone (the holder died or was cut off): it takes the task's lease, marks the attempts
// its holders left running unknown (store.Ledger.Abandon, what the task's next run does first),
// gives the lease back and records the decision. Fail closed: while the attempt's grant or any
// grant of the task is live, nothing is recorded (75: decide after it ends).
func (a *app) resolveGone(ctx context.Context, s store.Store, r store.ResolveRequest, l *store.Attempt) (store.Attempt, error) {
	leases, err := s.Leases(ctx)
	if err != nil {
		return store.Attempt{}, err
	}
	if store.LiveTokens(leases)[r.Task][l.Token] {
		return store.Attempt{}, exit(ExitBusy, "task %s slot %q: attempt %d is running now (holder %s): nothing was recorded; decide after it ends", r.Task, r.Slot, l.Number, cell(l.Holder))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return store.Attempt{}, err
	}
	req := store.AcquireRequest{Task: r.Task, Holder: r.By, RunID: "resolve-" + id.String(), TTL: 10 * time.Second} // a killed resolve blocks the task no longer
	ls, err := s.Acquire(ctx, req)
	// The dead holder's own grant, past its expiry but still in the store: a store may keep it up
	// to its granularity longer (etcd's leases last whole seconds). Wait that out, no longer.
	be := (*store.BusyError)(nil)
	for deadline := time.Now().Add(resolveGoneWait); errors.As(err, &be) && be.Lease.Token == l.Token && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return store.Attempt{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		ls, err = s.Acquire(ctx, req)
	}
	if errors.As(err, &be) {
		return store.Attempt{}, exit(ExitBusy, "task %s slot %q: attempt %d is still recorded as running and task %s's lease is held now (holder %s): nothing was recorded; decide after that run", r.Task, r.Slot, l.Number, r.Task, cell(be.Lease.Holder))
	}
	if err != nil {
		return store.Attempt{}, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.Release(rctx, ls) // failing that, it expires with req.TTL
	}()
	ab, err := s.Abandon(ctx, r.Task, ls.Token)
	if err != nil {
		return store.Attempt{}, err
	}
	for _, x := range ab {
		fmt.Fprintf(a.stderr, "task %s slot %s: attempt %d (run %s, holder %s, token %d) was still recorded as running with its holder's lease gone: marked unknown\n",
			cell(x.Task), cell(dash(x.Slot)), x.Number, cell(x.RunID), cell(x.Holder), x.Token)
	}
	att, err := s.Resolve(ctx, r)
	if errors.Is(err, store.ErrConflict) {
		// Abandon did not reach it: an older once on another host, which keeps no running index on
		// a key-value store, began it after the task's index was built. The task's next run finds it.
		return store.Attempt{}, exit(ExitBusy, "task %s slot %q: attempt %d is still recorded as running and could not be marked unknown (an older once on another host may have begun it): nothing was recorded; the slot's next run marks it unknown (upgrade every host that shares the store), then decide",
			r.Task, r.Slot, l.Number)
	}
	return att, err
}
