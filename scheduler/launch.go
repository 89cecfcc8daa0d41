package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Why a launch is made, in log lines.
const (
	whyFire    = "fire"
	whyCatchUp = "catch-up"
	whyFollow  = "follow-up"
	whyTrigger = "trigger"
	whyRerun   = "rerun"
)

// launch is one guarded call of a job on this node: one slot, or a catch-up's slots oldest first.
type launch struct {
	slots   []string
	untried bool   // once.Options.Untried: run only slots nobody has tried
	why     string // whyFire, …
	trigger string // the trigger request's run id this launch answers, removed once it ran
}

// jobState is one job on this node: its definition, its next slot, and what this node runs of it.
type jobState struct {
	s *Scheduler

	mu          sync.Mutex
	job         Job
	spec        slot.Spec
	next        slot.Slot         // the next slot to fire (dispatcher)
	active      *active           // the launch in progress on this node, nil when idle
	queue       []launch          // launches waiting for active to end (buffer-one, replace, follow-ups)
	watches     map[string]*watch // slots this node follows up, by slot
	needAccount bool              // a fire was refused: account before the next one
	removed     bool              // no longer in the jobs (a reload)
	lastFire    time.Time         // the fire time of the last slot fired, for Stats
	lastLag     time.Duration     // how late after its fire time the dispatcher fired it
}

// active is the launch in progress.
type active struct {
	l       launch
	cancel  context.CancelCauseFunc // ends a Work job's context (stop)
	runner  *job.Runner             // a command job's runner
	run     *once.Run               // the attempt running now, nil between attempts
	stopped string                  // why it was stopped (replace, timeout, drain), "" if not
}

func (js *jobState) takeAccount() bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	a := js.needAccount
	js.needAccount = false
	return a
}

// fire launches slot sl, applying the overlap policy when this node still runs the job.
func (s *Scheduler) fire(ctx context.Context, js *jobState, sl slot.Slot) {
	s.stats.fired.Add(1)
	js.mu.Lock()
	jb := js.job
	js.mu.Unlock()
	if _, paused := s.isPaused(jb.Name); paused {
		s.offDispatch(func() { s.pausedSlot(ctx, jb, sl.Value) })
		return
	}
	js.mu.Lock()
	l := launch{slots: []string{sl.Value}, untried: true, why: whyFire}
	if js.active == nil {
		js.startLocked(ctx, l)
		js.mu.Unlock()
		return
	}
	defer js.mu.Unlock()
	js.overlapLocked(ctx, l)
}

// overlapLocked applies the job's overlap policy to launch l, due while js.active runs.
func (js *jobState) overlapLocked(ctx context.Context, l launch) {
	s, jb, a := js.s, js.job, js.active
	running := a.run
	if running == nil { // between attempts, or not started: not an overlap yet
		js.enqueueLocked(l)
		return
	}
	sl := l.slots[0]
	switch jb.Overlap {
	case "buffer-one":
		for _, q := range js.queue {
			if q.why == whyFire {
				s.overlapSkip(ctx, jb, sl, running, fmt.Sprintf("overlap = buffer-one: slot %s already waits for slot %s to end", q.slots[0], running.Slot))
				return
			}
		}
		s.log.Info("overlap: slot waits for the previous one to end (buffer-one)", "task", jb.Name, "slot", sl, "running_slot", running.Slot)
		js.enqueueLocked(l)
	case "replace":
		for i, q := range js.queue {
			if q.why == whyFire {
				s.overlapSkip(ctx, jb, q.slots[0], running, fmt.Sprintf("overlap = replace: slot %s came while it waited", sl))
				js.queue = slices.Delete(js.queue, i, i+1)
				break
			}
		}
		js.enqueueLocked(l)
		js.stopLocked(ctx, fmt.Sprintf("replaced by slot %s (overlap = replace)", sl))
	default: // skip
		s.overlapSkip(ctx, jb, sl, running, fmt.Sprintf("overlap = skip: slot %s still runs on %s (attempt %d, run %s)",
			running.Slot, running.Holder, running.Attempt, running.RunID))
	}
}

// overlapSkip records that slot sl was not run because of an overlap. Only the node that runs
// the job records it, so the fleet records it once.
func (s *Scheduler) overlapSkip(ctx context.Context, jb Job, sl string, running *once.Run, note string) {
	s.log.Info("skipped", "task", jb.Name, "slot", sl, "reason", note)
	e := store.Event{Task: jb.Name, Slot: sl, Kind: store.Skipped, Holder: s.c.Node, Token: running.Token, RunID: running.RunID, Note: note}
	s.offDispatch(func() { s.record(ctx, e) })
}

// offDispatch runs a store write off the dispatcher (which must not wait for the store between
// fires) and the job's lock; Run waits for it before it returns.
func (s *Scheduler) offDispatch(fn func()) {
	s.writes.Add(1)
	go func() {
		defer s.writes.Done()
		fn()
	}()
}

func (s *Scheduler) record(ctx context.Context, e store.Event) {
	e.Note = store.Clip(e.Note, store.MaxNoteLen)
	if err := s.c.Store.Record(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("could not record event", "task", e.Task, "slot", e.Slot, "event", string(e.Kind), "err", err)
	}
}

// enqueueLocked queues l behind the active launch, once per slot set.
func (js *jobState) enqueueLocked(l launch) {
	for _, q := range js.queue {
		if slices.Equal(q.slots, l.slots) {
			return
		}
	}
	js.queue = append(js.queue, l)
}

// submit starts l now when the job is idle on this node, else queues it.
func (js *jobState) submit(ctx context.Context, l launch) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.removed {
		return
	}
	if js.active == nil {
		js.startLocked(ctx, l)
		return
	}
	js.enqueueLocked(l)
}

// startLocked makes l the active launch and runs it in a goroutine; when it ends, the next queued
// launch starts (unless the scheduler drains).
func (js *jobState) startLocked(ctx context.Context, l launch) {
	s := js.s
	if s.isDraining() {
		return
	}
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	a := &active{l: l, cancel: cancel}
	js.active = a
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer cancel(nil)
		js.call(lctx, a)
		js.mu.Lock()
		defer js.mu.Unlock()
		js.active = nil
		if len(js.queue) > 0 && !js.removed {
			next := js.queue[0]
			js.queue = js.queue[1:]
			js.startLocked(ctx, next)
		}
	}()
}

// stopLocked stops the active launch through its stop path: a command gets SIGTERM and is killed
// after its grace; a Work job's context is cancelled. Its outcome is still recorded.
func (js *jobState) stopLocked(ctx context.Context, why string) {
	a := js.active
	if a == nil || a.stopped != "" {
		return
	}
	a.stopped = why
	if r := a.run; r != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := js.s.c.Store.Report(rctx, r.RunID, r.Token, store.Report{Note: "stopped: " + why}); err != nil {
			js.s.log.Debug("could not note why the attempt is stopped", "task", r.Task, "run_id", r.RunID, "err", err)
		}
		cancel()
	}
	js.s.log.Info("stopping the running attempt", "task", js.job.Name, "reason", why)
	if a.runner != nil {
		a.runner.Stop(syscall.SIGTERM)
	}
	a.cancel(fmt.Errorf("stopped: %s", why))
}
