package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
)

// Lease states of a running attempt as status shows them.
const (
	leaseLive = "live" // its holder's lease (or seat) is held: the attempt runs
	leaseGone = "gone" // expired or taken over: the holder died or was cut off
)

// running is an attempt still running as status lists it.
type running struct {
	store.Attempt
	// Lease is "live" when the holder's grant (its token) is held now, "gone" otherwise.
	Lease string `json:"lease"`
	// Resolve, when the lease is gone and no grant of the task is live, is the once resolve line
	// per decision that settles the slot now (resolve marks the attempt unknown first).
	Resolve *notify.Resolve `json:"resolve,omitempty"`
	// HeldBy, when the lease is gone but another grant of the task is live (a seat of once run
	// --limit, a run that took the lease over), is that grant: once resolve refuses (75) while
	// one is live, so no resolve line is offered.
	HeldBy *store.Lease `json:"held_by,omitempty"`
}

// runningSection is what status shows of the attempts still running.
type runningSection struct {
	list     []running
	more     bool     // the store had more than store.MaxRunningList
	unlisted []string // tasks whose running attempts the store could not list
	listed   bool     // the store is a store.RunningLister
	pwNote   string   // a.hiddenPassword's line for the resolve commands, or ""
}

// readRunning lists the attempts still running (store.RunningLister) and reads the leases after
// them, so that an attempt's grant, live when it began, is in the leases when it still is. An
// attempt whose grant is not is read again (Slot): one that ended between the two reads is left
// out. It returns the leases too, for status's LEASES.
func (a *app) readRunning(ctx context.Context, s store.Store, dsn string) (runningSection, []store.Lease, error) {
	sec := runningSection{pwNote: a.hiddenPassword(dsn)}
	rl, ok := s.(store.RunningLister)
	var list store.RunningList
	if ok {
		var err error
		list, err = rl.RunningAttempts(ctx, store.MaxRunningList)
		switch {
		case errors.Is(err, store.ErrUnsupported): // a ledger over a KV without the index
		case err != nil:
			return sec, nil, err
		default:
			sec.listed, sec.more, sec.unlisted = true, list.More, list.Unlisted
		}
	}
	leases, err := s.Leases(ctx)
	if err != nil {
		return sec, nil, err
	}
	live := liveTokens(leases)
	sec.list = []running{}
	for _, at := range list.Attempts {
		if live[at.Task][at.Token] {
			sec.list = append(sec.list, running{Attempt: at, Lease: leaseLive})
			continue
		}
		st, err := s.Slot(ctx, at.Task, at.Slot)
		if err != nil {
			return sec, nil, err
		}
		if st.Last == nil || st.Last.RunID != at.RunID || st.Last.State != store.Running {
			continue // it ended since it was listed
		}
		r := running{Attempt: *st.Last, Lease: leaseGone}
		if i := slices.IndexFunc(leases, func(l store.Lease) bool { return l.Task == at.Task }); i >= 0 {
			r.HeldBy = &leases[i]
		} else {
			r.Resolve = a.resolveCommands(dsn, at.Task, at.Slot)
		}
		sec.list = append(sec.list, r)
	}
	// By task and slot, whatever the order of the store's index (MySQL's is by slot).
	slices.SortStableFunc(sec.list, func(x, y running) int {
		return cmp.Or(strings.Compare(x.Task, y.Task), strings.Compare(x.Slot, y.Slot), x.Number-y.Number)
	})
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
		if r.Lease != leaseGone {
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
	if liveTokens(leases)[r.Task][l.Token] {
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
