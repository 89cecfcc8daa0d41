package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// The fleet's control requests are business keys (store.Keys) in these scopes, one key per job
// name, pending under a claimant that never goes away, so that a request holds until it is taken
// back: a pause until Resume, a trigger until a node has run it.
const (
	PauseScope   = "once.scheduler.paused"
	TriggerScope = "once.scheduler.trigger"
)

// ErrNoKeys: the store keeps no business keys, so the fleet cannot share control requests.
var ErrNoKeys = errors.New("the store keeps no business keys (store.Keys): pause, resume and trigger need them")

func keysOf(s store.Store) (store.Keys, error) {
	k, ok := s.(store.Keys)
	if !ok {
		return nil, ErrNoKeys
	}
	return k, nil
}

// MaxPauseNote is the longest note a pause takes (once pause --note, the dashboard's form).
const MaxPauseNote = 200

// Pause pauses job name for the whole fleet: no node fires its slots until Resume (each paused
// slot is recorded once as skipped). by and note say who and why (shown by Paused). It reports
// false, with the pause in force, when the job was already paused.
func Pause(ctx context.Context, s store.Store, name, by, note string) (bool, store.Key, error) {
	return request(ctx, s, PauseScope, name, store.Clip("pause by "+by+": "+note, store.MaxRunIDLen))
}

// request claims job name's key in scope as a pending request whose claimant is id, held until
// taken back. It reports false, with the request in force, when one was already there.
func request(ctx context.Context, s store.Store, scope, name, id string) (bool, store.Key, error) {
	k, err := keysOf(s)
	if err != nil {
		return false, store.Key{}, err
	}
	if err := once.ValidateTask(name); err != nil {
		return false, store.Key{}, err
	}
	won, err := k.Claim(ctx, store.ClaimRequest{Scope: scope, Keys: []string{name}, Pending: true,
		Claimant: store.Claimant{RunID: id}})
	if err != nil || won[0] {
		return err == nil, store.Key{}, err
	}
	got, err := k.Lookup(ctx, scope, []string{name})
	if err != nil || len(got) == 0 { // taken back in between
		return false, store.Key{}, err
	}
	return false, got[0], nil
}

// Resume ends a pause of job name; false when it was not paused.
func Resume(ctx context.Context, s store.Store, name string) (bool, error) {
	k, err := keysOf(s)
	if err != nil {
		return false, err
	}
	got, err := k.Lookup(ctx, PauseScope, []string{name})
	if err != nil || len(got) == 0 {
		return false, err
	}
	return true, k.ReleaseKeys(ctx, PauseScope, []string{name}, got[0].RunID)
}

// Paused returns the pauses in force among names, by name.
func Paused(ctx context.Context, s store.Store, names []string) (map[string]store.Key, error) {
	return lookup(ctx, s, PauseScope, names)
}

// Triggered returns the trigger requests waiting among names, by name.
func Triggered(ctx context.Context, s store.Store, names []string) (map[string]store.Key, error) {
	return lookup(ctx, s, TriggerScope, names)
}

// lookup returns the keys of scope among names, by name: from a walk of the scope when it holds
// fewer keys than names (walkScope: a fleet's pauses or triggers, usually none, whatever the
// number of jobs), else by name, 500 names a call. Each node polls it for all its jobs every
// --poll: with 1,000 jobs the look-up by name probed 1,000 keys of each scope, per poll.
func lookup(ctx context.Context, s store.Store, scope string, names []string) (map[string]store.Key, error) {
	out, _, err := lookupWalk(ctx, s, scope, names, true)
	return out, err
}

// lookupWalk is lookup, without the walk when walk is false; crowded reports that the walk found
// the scope holding as many keys as names or more (the look-up by name followed it).
func lookupWalk(ctx context.Context, s store.Store, scope string, names []string, walk bool) (out map[string]store.Key, crowded bool, err error) {
	k, err := keysOf(s)
	if err != nil {
		return nil, false, err
	}
	if walk {
		var ok bool
		if out, ok, crowded = walkScope(ctx, s, scope, names); ok {
			return out, false, nil
		}
	}
	out = map[string]store.Key{}
	for len(names) > 0 {
		n := min(len(names), 500)
		got, err := k.Lookup(ctx, scope, names[:n])
		if err != nil {
			return nil, crowded, err
		}
		for _, x := range got {
			out[x.Key] = x
		}
		names = names[n:]
	}
	return out, crowded, nil
}

// crowdedPolls is how many polls a node looks its jobs' names up in a control scope without
// walking it first after a walk found it holding more requests than the node has jobs (a fleet
// with many pauses in force, a node with few of its jobs): not a page and the look-up every poll.
const crowdedPolls = 30

// controlRequests is lookup of names in scope for pollControl: without the walk for crowdedPolls
// polls after a walk found the scope crowded.
func (s *Scheduler) controlRequests(ctx context.Context, scope string, names []string) (map[string]store.Key, error) {
	s.ctlMu.Lock()
	skip := s.crowded[scope]
	if skip > 0 {
		s.crowded[scope]--
	}
	s.ctlMu.Unlock()
	out, crowded, err := lookupWalk(ctx, s.c.Store, scope, names, skip == 0)
	if crowded {
		s.ctlMu.Lock()
		if s.crowded == nil {
			s.crowded = map[string]int{}
		}
		s.crowded[scope] = crowdedPolls
		s.ctlMu.Unlock()
	}
	return out, err
}

// walkFrom is how many names a look-up needs before walkScope tries a walk of the scope: below
// it, the names' one Lookup call costs as little as a page of the scope.
const walkFrom = 50

// walkScope returns the keys of scope among names from a walk of the scope (store.ScopeLister),
// when the store walks scopes, names are at least walkFrom and the walk ends within len(names)
// keys read and maxWalkPages pages (else ok is false, as when the walk fails: a look-up by name
// reads less, or tells the error). A walk's key is as Lookup reports
// it (its state, its claimant), without its Result, which no control request has.
func walkScope(ctx context.Context, s store.Store, scope string, names []string) (out map[string]store.Key, ok, crowded bool) {
	sl, ok := s.(store.ScopeLister)
	if !ok || len(names) < walkFrom {
		return nil, false, false
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out = map[string]store.Key{}
	read := 0
	for cursor, pages := "", 0; pages < maxWalkPages; pages++ {
		keys, next, err := sl.ScopeKeys(ctx, scope, cursor, min(len(names)-read, store.MaxScopesPage))
		if err != nil {
			return nil, false, false // the look-up by name says what is wrong, if anything still is
		}
		read += len(keys)
		for _, x := range keys {
			if want[x.Key] {
				out[x.Key] = x
			}
		}
		if next == "" {
			return out, true, false
		}
		if read >= len(names) {
			return nil, false, true
		}
		cursor = next
	}
	return nil, false, true
}

// maxWalkPages bounds the pages of a walkScope (a page may hold fewer keys than asked when more
// follow: a Redis hash scan).
const maxWalkPages = 4

// ManualSlotPrefix starts the slot of a manual run (Trigger).
const ManualSlotPrefix = "manual:"

// triggerPrefix starts a trigger request's claimant run id; the slot follows it.
const triggerPrefix = "trigger "

// Trigger asks the fleet to run job name now, once, in a slot of its own ("manual:" and the UTC
// time), through the guard as any slot. A node running the job picks it up within its poll; the
// request is removed once it ran. It reports false, with the waiting request's slot, when a
// trigger of the job already waits.
func Trigger(ctx context.Context, s store.Store, name string, now time.Time) (bool, string, error) {
	sl := ManualSlotPrefix + now.UTC().Format("2006-01-02T15:04:05.000Z")
	won, k, err := request(ctx, s, TriggerScope, name, triggerPrefix+sl)
	if err != nil || won {
		return won, sl, err
	}
	return false, strings.TrimPrefix(k.RunID, triggerPrefix), nil
}

// pollControl reads the fleet's pauses and the triggers of this node's jobs.
func (s *Scheduler) pollControl(ctx context.Context) {
	if s.keys == nil {
		return
	}
	names := s.names()
	paused, err := s.controlRequests(ctx, PauseScope, names)
	if err != nil {
		if !stopping(ctx) {
			s.log.Warn("cannot read the fleet's pauses; keeping the last known", "err", err)
		}
	} else {
		s.ctlMu.Lock()
		for n := range paused {
			if _, was := s.paused[n]; !was {
				s.log.Info("job paused", "task", n, "by", paused[n].RunID)
			}
		}
		for n := range s.paused {
			if _, still := paused[n]; !still {
				s.log.Info("job resumed", "task", n)
			}
		}
		s.paused = paused
		s.ctlMu.Unlock()
	}
	trig, err := s.controlRequests(ctx, TriggerScope, names)
	if err != nil {
		if !stopping(ctx) {
			s.log.Warn("cannot read trigger requests", "err", err)
		}
		return
	}
	for name, k := range trig {
		s.startTrigger(ctx, name, k)
	}
}

func (s *Scheduler) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

func (s *Scheduler) isPaused(name string) (store.Key, bool) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	k, ok := s.paused[name]
	return k, ok
}

// startTrigger launches a trigger request's manual slot, unless this node already has it queued
// or running.
func (s *Scheduler) startTrigger(ctx context.Context, name string, k store.Key) {
	sl := strings.TrimPrefix(k.RunID, triggerPrefix)
	if !strings.HasPrefix(k.RunID, triggerPrefix) || slot.CheckValue(sl) != nil {
		s.log.Warn("ignoring a malformed trigger request", "task", name, "request", k.RunID)
		return
	}
	s.mu.Lock()
	js := s.jobs[name]
	s.mu.Unlock()
	if js == nil {
		return
	}
	js.mu.Lock()
	pending := false
	for _, a := range js.actives {
		pending = pending || a.l.trigger == k.RunID
	}
	for _, q := range js.queue {
		pending = pending || q.trigger == k.RunID
	}
	js.mu.Unlock()
	if pending {
		return
	}
	s.log.Info("triggered", "task", name, "slot", sl)
	js.submit(ctx, launch{slots: []string{sl}, untried: true, why: whyTrigger, trigger: k.RunID})
}

// triggerDone removes an answered trigger request.
func (s *Scheduler) triggerDone(ctx context.Context, name, runID string) {
	if s.keys == nil {
		return
	}
	if err := s.keys.ReleaseKeys(context.WithoutCancel(ctx), TriggerScope, []string{name}, runID); err != nil {
		s.log.Warn("cannot remove the answered trigger request; another node may find its slot done", "task", name, "err", err)
	}
}

// pausedSlot records, once per fleet, that a slot of a paused job was not run.
func (s *Scheduler) pausedSlot(ctx context.Context, jb Job, sl string) {
	s.pausedSlots(ctx, jb, []string{sl})
}

// pausedSlots records, once per fleet, that slots of a paused job were not run: one claim for all
// of them (recordOnce), then a record each (a paused job's gap, up to maxMissedEvents + 1 slots).
func (s *Scheduler) pausedSlots(ctx context.Context, jb Job, slots []string) {
	if len(slots) == 0 {
		return
	}
	note := "paused when its run was due (resumed since)"
	if k, ok := s.isPaused(jb.Name); ok {
		note = fmt.Sprintf("paused (%s since %s): once resume %s", k.RunID, k.ClaimedAt.UTC().Format(time.RFC3339), jb.Name)
	}
	events := make([]store.Event, len(slots))
	for i, sl := range slots {
		events[i] = store.Event{Task: jb.Name, Slot: sl, Kind: store.Skipped, Holder: s.c.Node, Note: note}
	}
	n, err := s.recordOnce(ctx, "paused", events)
	switch {
	case err != nil:
		s.log.Warn("cannot record a paused job's slots", "task", jb.Name, "slots", len(slots), "first", slots[0], "err", err)
	case n == 1 && len(slots) == 1:
		s.log.Info("skipped", "task", jb.Name, "slot", slots[0], "reason", note)
	case n > 0:
		s.log.Info("skipped", "task", jb.Name, "slots", n, "first", slots[0], "last", slots[len(slots)-1], "reason", note)
	}
}
