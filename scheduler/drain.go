package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

func (s *Scheduler) isDraining() bool { return s.draining.Load() }

// drain ends a Run: nothing new starts, queued launches are dropped (the nodes that watch their
// slots run those that waited behind another; with none, the next start's account finds them
// behind the newest slot: holes.go), running ones get Config.Drain to end and are then
// stopped through their stop path, and drain returns once every launch has ended — but for a Work
// function still running its grace after its context was cancelled: Go cannot stop it, so drain
// returns an error naming it instead of waiting for it for ever.
func (s *Scheduler) drain() error {
	s.draining.Store(true)
	s.mu.Lock()
	jobs := make([]*jobState, 0, len(s.jobs))
	for _, js := range s.jobs {
		jobs = append(jobs, js)
	}
	jobs = append(jobs, s.retired...)
	s.mu.Unlock()
	running := 0
	var skips []queuedSkip
	for _, js := range jobs {
		js.mu.Lock()
		if n := len(js.queue); n > 0 {
			s.log.Info("draining: dropping queued launches", "task", js.job.Name, "launches", n)
		}
		skips = append(skips, js.queuedSkipsLocked()...)
		js.queue = nil
		js.restLeftLocked()
		running += len(js.actives)
		js.mu.Unlock()
	}
	err := s.awaitRuns(jobs, running)
	s.recordQueuedSkips(skips)
	s.recordOwed(jobs)
	return err
}

// awaitRuns waits for the running launches to end (drain), stopping them once the drain's time is
// over or Hurry was called.
func (s *Scheduler) awaitRuns(jobs []*jobState, running int) error {
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	if running > 0 {
		s.log.Info("draining: waiting for running jobs to end", "running", running, "drain", s.c.Drain.String())
	}
	why := "the node drains (its drain time is over)"
	select {
	case <-done:
		return nil
	case <-time.After(s.c.Drain):
	case <-s.hurry:
		why = "the node drains (a second stop signal: stopped at once)"
	}
	grace := time.Duration(0) // the longest grace of a Work job stopped now
	var signalled []chan struct{}
	for _, js := range jobs {
		js.mu.Lock()
		for _, a := range js.actives {
			js.stopLocked(context.Background(), a, why)
			grace = max(grace, a.workGrace)
			if a.workGrace > 0 {
				signalled = append(signalled, a.signalled)
			}
		}
		js.mu.Unlock()
	}
	if grace > 0 {
		for _, c := range signalled { // a Work's grace runs from its context's end, after its note
			select {
			case <-done:
				return nil
			case <-c:
			}
		}
		select {
		case <-done:
			return nil
		case <-time.After(grace):
		}
		if stuck := stuckWork(jobs); len(stuck) > 0 {
			s.log.Error("draining: a job's Work ignores its context; it is left running", "jobs", stuck, "grace", grace.String())
			return fmt.Errorf("scheduler: the Work of %s has not returned %s after its context was cancelled; "+
				"it is left running (its attempt stays running and its lease held until it returns or this process exits, "+
				"then it is unknown): make it return when its context is cancelled", strings.Join(stuck, ", "), grace)
		}
	}
	<-done // commands killed after their grace, outcomes being recorded: each bounded
	return nil
}

// graceOf is the grace a job's stop gives it: its own, else Config.Grace.
func (s *Scheduler) graceOf(jb Job) time.Duration {
	if jb.Grace > 0 {
		return jb.Grace
	}
	return s.c.Grace
}

// stuckWork names the jobs whose Work function still runs.
func stuckWork(jobs []*jobState) []string {
	var stuck []string
	for _, js := range jobs {
		js.mu.Lock()
		for _, a := range js.actives {
			if a.working.Load() {
				stuck = append(stuck, js.job.Name)
				break
			}
		}
		js.mu.Unlock()
	}
	return stuck
}

// queuedSkip is a slot of an overlap = skip job that waited in the queue when the drain dropped it
// (queuedSkipsLocked), with the slots of the launches it waited behind.
type queuedSkip struct {
	jb     Job
	slot   string
	behind []string
	note   string
}

// queuedSkipsLocked lists each slot of an overlap = skip job that waited in the queue when the
// drain dropped it: it fired while this node's launch of the job had not begun its attempt (or
// was between attempts), so it was queued, not skipped. A node that follows the slot up records
// the same skip under the same claim; with none (the whole fleet stopped, a one-node fleet) the
// slot had no record at all, and the next start's account, which walks the slots after the
// newest recorded one, never saw it: recordQueuedSkips records them. A buffer-one slot, or a
// catch-up, is left to the nodes that follow it (they run it), else to the next start's account
// (holes.go).
func (js *jobState) queuedSkipsLocked() []queuedSkip {
	jb := js.job
	if jb.Overlap != "" && jb.Overlap != "skip" {
		return nil
	}
	behind, first := []string(nil), "another"
	for _, a := range js.actives {
		behind = append(behind, a.l.slots...)
	}
	if len(behind) > 0 {
		first = behind[0]
	}
	var out []queuedSkip
	for _, q := range js.queue {
		if q.why == whyFire && len(q.slots) == 1 {
			out = append(out, queuedSkip{jb: jb, slot: q.slots[0], behind: behind,
				note: fmt.Sprintf("overlap = skip: slot %s waited for the launch of slot %s to begin when this node drained", q.slots[0], first)})
		}
	}
	return out
}

// recordQueuedSkips records the queued skips of a drain once its launches have ended, each only
// when every slot it waited behind has a record by then: a launch that never began its attempt
// in the whole drain left its slot without one, and a skip recorded after it would make the skip
// the job's newest slot, so that the next start's account never saw the slot before it. Left
// unrecorded, both are in that account's gap (caught up, or recorded missed).
func (s *Scheduler) recordQueuedSkips(skips []queuedSkip) {
	for _, q := range skips {
		s.offDispatch(context.Background(), func(ctx context.Context) {
			for _, b := range q.behind {
				h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: q.jb.Name, Slot: b, Limit: 1})
				if err != nil || len(h) == 0 {
					s.log.Info("not recorded as skipped: the slot it waited behind has no record; the next start accounts both",
						"task", q.jb.Name, "slot", q.slot, "behind", b, "err", err)
					return
				}
			}
			s.overlapSkip(ctx, q.jb, q.slot, nil, q.note)
		})
	}
}

// restLeftLocked says, as the node drains, which slots of catch-ups that ended early it had not
// run or found recorded yet (js.rest, and those it followed up): they are left without a record
// until a node's next account (its start) finds them by their queued marks (queuedBehind) and
// catches them up, or records them missed beyond the job's catch-up window or catch-up-max. No
// running node accounts the job again on its own.
func (js *jobState) restLeftLocked() {
	left := slices.Clone(js.rest)
	for _, w := range js.watches {
		if w.rest && !slices.Contains(left, w.slot) {
			left = append(left, w.slot)
		}
	}
	if len(left) == 0 {
		return
	}
	at := func(sl string) time.Time { t, _ := js.spec.Parse(sl); return t }
	slices.SortFunc(left, func(a, b string) int { return at(a).Compare(at(b)) })
	js.s.log.Warn("draining: slots of a catch-up that ended early were neither run nor recorded yet; the next start of a node with this job catches them up (or records them missed, outside its catch-up window or beyond catch-up-max): if no node starts soon, check them with once history and run them with once backfill",
		"task", js.job.Name, "slots", len(left), "first", left[0], "last", left[len(left)-1])
}
