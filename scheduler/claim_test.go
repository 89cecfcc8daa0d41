package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/postgres"
	_ "github.com/once-run/once/store/redis"
	_ "github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/store/storetest"
	_ "github.com/once-run/once/store/zk"
)

// Launch claims (claim.go) on every store: a slot a run may begin late is recorded missed or
// run, not both, whichever of the two claims the store took first; the orders are made, not
// waited for, by a store wrapper that holds a call (gate). A real store under it, no mock.
func TestLateRunOrMissedRecordOnEveryStore(t *testing.T) {
	t.Parallel()
	onEveryStore(t, map[string]func(*testing.T, *claimRig){
		"recorder first":                     recorderFirst,
		"run between the read and the claim": runBetweenReadAndClaim,
		"recorder while the run runs":        recorderWhileRunning,
		"run died before its attempt":        runDiedBeforeAttempt,
		"only late fires claim":              onlyLateFiresClaim,
		"catch-up meets a missed record":     catchUpMeetsAMissedRecord,
		"recorder lost to a run that failed": recorderLostToARunThatFailed,
		"recorder cannot tell who won":       recorderCannotTellWhoWon,
		"hole read fails":                    holeReadFails,
	})
}

// A catch-up (a sequence under one lease) that ends before its last slot leaves no slot without
// a record: the node follows up the slots it did not reach and runs them once the job's lease is
// free, whatever ended it. The guard ends a sequence without an error when its lease is lost or an
// outcome is not recorded; the scheduler then looked at none of the rest, which newer slots hid
// from the job's next account, until the node's next start (a loaded run of
// TestStoppedCatchUpBeginsNoFurtherSlot: the restarted node's catch-up lost its lease in a slot,
// the rest stayed without a record while every newer slot ran). A slot claimed first by another
// node ended it too, and its rest waited for the job's next fire (a day, for a daily job).
func TestSequenceEndedEarlyLeavesNoSlot(t *testing.T) {
	t.Parallel()
	onEveryStore(t, map[string]func(*testing.T, *claimRig){
		"lease lost":                              catchUpLosesItsLease,
		"outcome not recorded":                    catchUpOutcomeNotRecorded,
		"a slot claimed first":                    catchUpRestAfterAClaim,
		"a store error at a Begin":                catchUpBeginFails,
		"the rest of a long catch-up":             longCatchUpRest,
		"a long catch-up busy between two slots":  longCatchUpBusyBetweenSlots,
		"a drain before the rest is run":          drainBeforeTheRest,
		"the rest behind the newest entries":      restBehindTheNewestEntries,
		"the rest behind run under another name":  restBehindRunUnderAnotherName,
		"a rest of more than 100 behind":          aLongRestBehind,
		"a waited launch meets a run claim":       waitedMeetsRunClaim,
		"a store error then an account at a poll": storeErrorAccountAtAPoll,
	})
}

// A store error leaves a catch-up's slots to the job's account: it is tried at a poll once
// firstAccountRetry has passed, not only before the job's next fire (a day away for a daily job),
// and then finds them (this job has no catch-up window: recorded missed, the store answering).
func storeErrorAccountAtAPoll(t *testing.T, r *claimRig) {
	a, b, c := r.slot(47), r.slot(46), r.slot(45)
	before := time.Now()
	r.catchUpFailingAtSecondBegin(a, b, c)
	js := r.s.jobs[r.jb.Name]
	js.mu.Lock()
	retry, need := js.retryAccount, js.needAccount
	sp := js.spec
	js.next = sp.Next(time.Now().Add(time.Hour)) // the next fire is far: not the one to account it
	js.mu.Unlock()
	if !need || retry.Before(before.Add(firstAccountRetry)) || retry.After(time.Now().Add(firstAccountRetry*5/4)) {
		t.Fatalf("after a store error: needAccount %v, retry at %v; want an account tried %s later (a quarter more at most)", need, retry, firstAccountRetry)
	}
	if st := r.s.Stats(); st.AccountsDeferred != 1 || st.AccountsWaiting != 1 {
		t.Fatalf("Stats: %d accounts deferred, %d waiting; want 1 and 1", st.AccountsDeferred, st.AccountsWaiting)
	}
	r.s.retryAccounts(context.Background()) // too early: nothing
	js.mu.Lock()
	need = js.needAccount
	js.retryAccount = time.Now().Add(-time.Millisecond) // as if firstAccountRetry had passed
	js.mu.Unlock()
	if !need {
		t.Fatal("an account put off by a store error was taken before its time")
	}
	r.s.retryAccounts(context.Background())
	// Until the account has recorded them and ended: one that worked clears the backoff.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, mb := r.entries(b)
		_, mc := r.entries(c)
		js.mu.Lock()
		need, retry, backoff := js.needAccount, js.retryAccount, js.retryBackoff
		js.mu.Unlock()
		if mb == 1 && mc == 1 && !need && retry.IsZero() && backoff == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the account at a poll: slots %s and %s missed %d, %d times (want 1); needAccount %v, retry %v, backoff %s (want none)",
				b, c, mb, mc, need, retry, backoff)
		}
	}
	r.want(a, 1, 0)
	if st := r.s.Stats(); st.AccountsDeferred != 1 || st.AccountsWaiting != 0 {
		t.Fatalf("Stats after the account: %d accounts deferred, %d waiting; want 1 and 0", st.AccountsDeferred, st.AccountsWaiting)
	}
}

// A launch that waited in the queue finds its slot claimed by a live run of another node: it is
// not run now, and it is followed up; that run dies before its attempt (its lease given back, no
// Begin), and the follow-up runs the slot. It was dropped without a record.
func waitedMeetsRunClaim(t *testing.T, r *claimRig) {
	ctx := context.Background()
	sl := r.slot(5)
	l, err := r.g.Acquire(ctx, store.AcquireRequest{Task: r.jb.Name, Holder: "nodeB", RunID: "rB", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Claimant{Task: r.jb.Name, RunID: launchPrefix + "rB", Token: l.Token}
	if _, err := r.g.Claim(ctx, store.ClaimRequest{Scope: recordedScope, Keys: slotKeys(r.jb.Name, sl, claimKinds), Pending: true, Claimant: c}); err != nil {
		t.Fatal(err)
	}
	js := r.s.jobs[r.jb.Name]
	if js.dropClaimed(ctx, &active{l: launch{slots: []string{sl}, waited: true, untried: true, why: whyFollow}}, r.jb) {
		t.Fatal("a slot a live run claimed is left to run")
	}
	r.followed(sl)
	if err := r.g.Release(ctx, l); err != nil { // the run dies before its attempt
		t.Fatal(err)
	}
	r.followUntilRun(sl)
	r.want(sl, 1, 0)
}

// onEveryStore runs each scenario with a rig of its own on every store, a gate around a real one.
func onEveryStore(t *testing.T, scenarios map[string]func(*testing.T, *claimRig)) {
	storetest.EachStore(t, func(t *testing.T, st store.Store) {
		g := &gate{keyed: st.(keyed)}
		for name, fn := range scenarios {
			t.Run(name, func(t *testing.T) { fn(t, newClaimRig(t, g)) })
		}
	})
}

type keyed interface {
	store.Store
	store.Keys
}

// gate wraps a real store: it counts the claims and look-ups of recordedScope, can hold a
// recorder's claim (holdRecord) until released, and can fail the next Begin (failBegin).
type gate struct {
	keyed
	mu         sync.Mutex
	holdRecord chan struct{} // a recorder's Claim waits for it to close; entered is closed first
	entered    chan struct{}
	failBegin  bool
	failLookup bool          // the next Lookup of recordedScope fails
	failSlot   bool          // the next Slot read fails
	holdBegin  chan struct{} // the next Begin waits for it to close; beginning is closed first
	beginning  chan struct{}
	claims     atomic.Int64 // Claims by a launch
	lookups    atomic.Int64
	failRenew  atomic.Bool // every Renew fails while set: the lease is lost at 2/3 of its TTL
	failFinish bool        // the next Finish fails: the outcome is not recorded
}

func (g *gate) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if g.failRenew.Load() {
		return store.Lease{}, errors.New("gate: the store failed at Renew")
	}
	return g.keyed.Renew(ctx, l, ttl)
}

func (g *gate) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	g.mu.Lock()
	fail := g.failFinish
	g.failFinish = false
	g.mu.Unlock()
	if fail {
		return store.Attempt{}, errors.New("gate: the store failed at Finish")
	}
	return g.keyed.Finish(ctx, runID, token, o)
}

func (g *gate) Claim(ctx context.Context, r store.ClaimRequest) ([]bool, error) {
	if r.Scope == recordedScope && strings.HasPrefix(r.Claimant.RunID, launchPrefix) {
		g.claims.Add(1)
	}
	g.mu.Lock()
	hold, entered := g.holdRecord, g.entered
	if strings.HasPrefix(r.Claimant.RunID, recorderPrefix) && hold != nil {
		g.holdRecord, g.entered = nil, nil
	} else {
		hold = nil
	}
	g.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return g.keyed.Claim(ctx, r)
}

func (g *gate) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if scope == recordedScope {
		g.lookups.Add(1)
		g.mu.Lock()
		fail := g.failLookup
		g.failLookup = false
		g.mu.Unlock()
		if fail {
			return nil, errors.New("gate: the store failed at Lookup")
		}
	}
	return g.keyed.Lookup(ctx, scope, keys)
}

func (g *gate) Slot(ctx context.Context, task, sl string) (store.SlotState, error) {
	g.mu.Lock()
	fail := g.failSlot
	g.failSlot = false
	g.mu.Unlock()
	if fail {
		return store.SlotState{}, errors.New("gate: the store failed at Slot")
	}
	return g.keyed.Slot(ctx, task, sl)
}

func (g *gate) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	g.mu.Lock()
	fail, hold, beginning := g.failBegin, g.holdBegin, g.beginning
	g.failBegin, g.holdBegin, g.beginning = false, nil, nil
	g.mu.Unlock()
	if hold != nil {
		close(beginning)
		<-hold
	}
	if fail {
		return store.Attempt{}, errors.New("gate: the store failed at Begin")
	}
	return g.keyed.Begin(ctx, a)
}

// claimRig is one node (not running: its launches and records are called directly) with a
// buffer-one job of its own, hourly, and the slots hours ago (holes, as a node that stopped
// with them queued leaves them).
type claimRig struct {
	t   *testing.T
	g   *gate
	s   *Scheduler
	jb  Job
	ran atomic.Int64
	// hold, when set, is waited for by the work (a run in progress).
	hold chan struct{}
	// running is closed as the work starts, when set.
	running chan struct{}
}

func newClaimRig(t *testing.T, g *gate) *claimRig {
	r := &claimRig{t: t, g: g}
	name := "late-" + strings.NewReplacer(" ", "-", "/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	name = name[max(0, len(name)-60):]
	r.jb = Job{Job: jobfile.Job{Name: name, Schedule: QuietSchedule(time.Hour), TZ: "UTC", TTL: 2 * time.Second, Overlap: "buffer-one"},
		Work: func(ctx context.Context, _ *once.Run) error {
			r.ran.Add(1)
			if r.running != nil {
				close(r.running)
			}
			if r.hold != nil {
				select {
				case <-r.hold:
				case <-ctx.Done(): // the lease lost
					return context.Cause(ctx)
				}
			}
			return nil
		}}
	s, err := New(Config{Store: g, Jobs: []Job{r.jb}, Node: "nodeA", Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	return r
}

// slot is the slot of the job that began h hours ago.
func (r *claimRig) slot(h int) string {
	sp, err := r.jb.Spec()
	if err != nil {
		r.t.Fatal(err)
	}
	return sp.Prev(time.Now().Add(-time.Duration(h) * time.Hour)).Value
}

// launch runs l as the node's launch would (the guard, with the node's options), and returns
// the guard's error.
func (r *claimRig) launch(l launch) error {
	o := r.s.options(r.jb, l)
	if len(l.slots) > 1 {
		_, err := once.Sequence(context.Background(), o, l.slots, once.SeqOptions{KeepGoing: true, Quiet: true}, r.jb.Work)
		return err
	}
	o.Slot = l.slots[0]
	_, err := once.Do(context.Background(), o, r.jb.Work)
	return err
}

func (r *claimRig) follow(sl string) error {
	return r.launch(launch{slots: []string{sl}, untried: true, why: whyFollow})
}

// record records sl missed as a hole, as recordHoles does.
func (r *claimRig) record(sl string) {
	if !r.s.recordMissed(context.Background(), r.jb, gap{missed: []slot.Slot{{Value: sl}}}, holeNote) {
		r.t.Fatalf("recordMissed %s failed", sl)
	}
}

// entries returns slot sl's history: its attempts and events.
func (r *claimRig) entries(sl string) (attempts, missed int) {
	h, err := r.g.History(context.Background(), store.HistoryQuery{Task: r.jb.Name, Slot: sl})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range h {
		switch {
		case e.State == store.Missed:
			missed++
		case !isEvent(e.State):
			attempts++
		}
	}
	return attempts, missed
}

func (r *claimRig) want(sl string, attempts, missed int) {
	r.t.Helper()
	a, m := r.entries(sl)
	if a != attempts || m != missed {
		r.t.Fatalf("slot %s: %d attempts, %d missed events; want %d and %d", sl, a, m, attempts, missed)
	}
}

// The recorder claimed first: the run that follows does not begin, and says why.
func recorderFirst(t *testing.T, r *claimRig) {
	sl := r.slot(3)
	r.record(sl)
	err := r.follow(sl)
	if !errors.Is(err, errClaimed) || errors.Is(err, errRunsElsewhere) || !strings.Contains(err.Error(), "nodeA recorded missed") {
		t.Fatalf("a run of a slot recorded missed: %v; want errClaimed naming the record", err)
	}
	if r.ran.Load() != 0 {
		t.Fatal("the work ran")
	}
	r.want(sl, 0, 1)
	l0 := r.g.lookups.Load()
	r.record(sl) // another node's record, lost: one look-up of who won, more than before
	if n := r.g.lookups.Load() - l0; n != 1 {
		t.Errorf("a record that lost its claim looked the claims up %d times, want 1", n)
	}
	r.want(sl, 0, 1)
}

// The case the claims close: a node read the hole (no attempt) and is about to record it missed
// as another node's run of it begins. Without the run's claim both were recorded.
func runBetweenReadAndClaim(t *testing.T, r *claimRig) {
	sl := r.slot(4)
	hold, entered := make(chan struct{}), make(chan struct{})
	r.g.mu.Lock()
	r.g.holdRecord, r.g.entered = hold, entered
	r.g.mu.Unlock()
	r.s.holeMissed(context.Background(), r.jb, sl, holeNote) // reads the slot, then claims: held there
	<-entered
	if err := r.follow(sl); err != nil {
		t.Fatal(err)
	}
	close(hold)
	r.s.writes.Wait()
	if r.ran.Load() != 1 {
		t.Fatalf("ran %d times", r.ran.Load())
	}
	r.want(sl, 1, 0)
}

// A run that claimed its slot and runs: a node that records the slot missed meanwhile records
// nothing; nor once the run ended (its claim gone, the slot has an attempt).
func recorderWhileRunning(t *testing.T, r *claimRig) {
	sl := r.slot(5)
	r.hold, r.running = make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- r.follow(sl) }()
	<-r.running
	r.record(sl)
	close(r.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.record(sl)
	r.want(sl, 1, 0)
	if got, err := r.s.claimed(context.Background(), r.jb.Name, []string{sl}); err != nil || len(got) != 0 {
		t.Fatalf("claims of a slot run and ended: %v %v; want none that stands", got, err)
	}
}

// A run that claimed its slot and died before its attempt was recorded (here the store failed at
// Begin): the slot is not lost. Its claim does not count once the run's lease is gone, a node
// that records the slot missed takes it over, and so does a later run of another slot's.
func runDiedBeforeAttempt(t *testing.T, r *claimRig) {
	ctx := context.Background()
	a, b := r.slot(6), r.slot(7)
	for _, sl := range []string{a, b} {
		r.g.mu.Lock()
		r.g.failBegin = true
		r.g.mu.Unlock()
		if err := r.follow(sl); err == nil {
			t.Fatal("Begin failed, the launch did not")
		}
	}
	waitLeaseGone(t, r)
	for _, sl := range []string{a, b} {
		if got, err := r.s.claimed(ctx, r.jb.Name, []string{sl}); err != nil || len(got) != 0 {
			t.Fatalf("the claims of a run that died count: %v %v", got, err)
		}
	}
	r.record(a) // recorded missed: nothing ran it
	r.want(a, 0, 1)
	if err := r.follow(b); err != nil { // or run by a later launch
		t.Fatal(err)
	}
	r.want(b, 1, 0)
}

func waitLeaseGone(t *testing.T, r *claimRig) {
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ls, err := r.g.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held := false
		for _, l := range ls {
			held = held || l.Task == r.jb.Name
		}
		if !held {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the lease of a run that died is still held")
		}
	}
}

// Round trips: a fire on time claims nothing and reads no claim; a fire that begins late claims
// (one Claim); a follow-up claims in place of the look-up it made before (one Claim, no Lookup).
func onlyLateFiresClaim(t *testing.T, r *claimRig) {
	for i, c := range []struct {
		l               launch
		claims, lookups int64
	}{
		{launch{untried: true, why: whyFire, fireAt: r.s.clock.now()}, 0, 0},
		{launch{untried: true, why: whyFire, fireAt: r.s.clock.now().Add(-2 * late)}, 1, 0},
		{launch{untried: true, why: whyFollow}, 1, 0},
	} {
		c.l.slots = []string{r.slot(10 + i)}
		c0, l0 := r.g.claims.Load(), r.g.lookups.Load()
		if err := r.launch(c.l); err != nil {
			t.Fatal(err)
		}
		if c1, l1 := r.g.claims.Load()-c0, r.g.lookups.Load()-l0; c1 != c.claims || l1 != c.lookups {
			t.Errorf("%s launch %d: %d claims, %d look-ups of the fleet's claims; want %d and %d", c.l.why, i, c1, l1, c.claims, c.lookups)
		}
	}
}

// A catch-up (a sequence) claims each slot as it comes: the slot another node recorded missed
// first is not run, and the sequence ends there (the guard's part; the node then follows its later
// slots up: catchUpRestAfterAClaim).
func catchUpMeetsAMissedRecord(t *testing.T, r *claimRig) {
	a, b, c := r.slot(22), r.slot(21), r.slot(20)
	r.record(b)
	err := r.launch(launch{slots: []string{a, b, c}, untried: true, why: whyCatchUp})
	if !errors.Is(err, errClaimed) {
		t.Fatalf("a catch-up over a slot recorded missed: %v; want errClaimed", err)
	}
	if r.ran.Load() != 1 {
		t.Fatalf("ran %d slots, want the first alone", r.ran.Load())
	}
	r.want(a, 1, 0)
	r.want(b, 0, 1)
	r.want(c, 0, 0)
}

// A record that lost to a run's claim, the run then failing before its attempt (the store failed
// at its Begin): the slot is followed up, and recorded missed once the run's lease is gone, not
// left without a record.
func recorderLostToARunThatFailed(t *testing.T, r *claimRig) {
	ctx := context.Background()
	sl := r.slot(8)
	hold, beginning := make(chan struct{}), make(chan struct{})
	r.g.mu.Lock()
	r.g.failBegin, r.g.holdBegin, r.g.beginning = true, hold, beginning
	r.g.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- r.follow(sl) }()
	select {
	case <-beginning: // claimed, its attempt not recorded yet
	case err := <-done:
		t.Fatalf("the launch ended before its Begin: %v", err)
	}
	r.record(sl)
	r.want(sl, 0, 0)
	close(hold)
	if err := <-done; err == nil {
		t.Fatal("Begin failed, the launch did not")
	}
	waitLeaseGone(t, r)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.s.followUp(ctx)
		r.s.writes.Wait()
		if _, m := r.entries(sl); m > 0 || time.Now().After(end) {
			break
		}
	}
	r.want(sl, 0, 1)
}

// A record that lost its claim to a run that died before its attempt, and that cannot read who
// holds the claim (the store failed at the Lookup): the slot is followed up and recorded missed
// at a later poll, not left without a record.
func recorderCannotTellWhoWon(t *testing.T, r *claimRig) {
	sl := r.slot(9)
	r.g.mu.Lock()
	r.g.failBegin = true
	r.g.mu.Unlock()
	if err := r.follow(sl); err == nil {
		t.Fatal("Begin failed, the launch did not")
	}
	waitLeaseGone(t, r)
	r.g.mu.Lock()
	r.g.failLookup = true
	r.g.mu.Unlock()
	r.record(sl)
	r.want(sl, 0, 0)
	followUntilMissed(t, r, sl)
	r.want(sl, 0, 1)
}

// followUntilMissed has the node follow its slots up until sl is recorded missed (10 s at most).
func followUntilMissed(t *testing.T, r *claimRig, sl string) {
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.s.followUp(context.Background())
		r.s.writes.Wait()
		if _, m := r.entries(sl); m > 0 || time.Now().After(end) {
			return
		}
	}
}

// A launch that lost its slot's claim to another node's live run (a seat's) follows the slot up,
// as a launch that found the job busy does: that run may still die before its attempt. One that
// lost to a record does not (the record stands).
func TestClaimedFirstFollowsARunElsewhere(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	jb := Job{Job: jobfile.Job{Name: "seats", Schedule: "@every 1h", TZ: "UTC", Limit: 2, Overlap: "buffer-one"},
		Work: func(context.Context, *once.Run) error { return nil }}
	s, err := New(Config{Store: st, Jobs: []Job{jb}, Node: "nodeA"})
	if err != nil {
		t.Fatal(err)
	}
	// A key lost and given back before the look-up of who holds it: followed up too.
	c := store.Claimant{Task: jb.Name, RunID: launchPrefix + "r2", Token: 1}
	if standing, launched, err := s.takeOverGone(context.Background(), slotKeys(jb.Name, "2026-01-01T02:00:00Z", claimKinds), &c); err != nil ||
		!launched || !strings.Contains(standing, "given back") {
		t.Errorf("a claim given back: %q %v %v; want it followed up", standing, launched, err)
	}
	js := s.jobs[jb.Name]
	for _, c := range []struct {
		slot   string
		err    error
		follow bool
	}{
		{"2026-01-01T00:00:00Z", fmt.Errorf("%w: %w: run r1 …", errClaimed, errRunsElsewhere), true},
		{"2026-01-01T01:00:00Z", fmt.Errorf("%w: nodeB recorded missed first", errClaimed), false},
	} {
		js.claimedFirst(context.Background(), js.job, &active{l: launch{slots: []string{c.slot}, untried: true, why: whyFollow}}, c.err)
		js.mu.Lock()
		w := js.watches[c.slot]
		js.mu.Unlock()
		if (w != nil) != c.follow || w != nil && !w.runIfUntried {
			t.Errorf("%v: watch %+v; want followed up (to run if untried): %v", c.err, w, c.follow)
		}
	}
	// A late fire of a job with overlap = skip is not run late: if the run that claimed it dies
	// before its attempt, the follow-up records the skip (without a note it dropped the slot).
	jb.Overlap = "skip"
	js.job = jb
	sl := "2026-01-01T03:00:00Z"
	js.claimedFirst(context.Background(), jb, &active{l: launch{slots: []string{sl}, untried: true, why: whyFire}},
		fmt.Errorf("%w: %w: run r3 …", errClaimed, errRunsElsewhere))
	js.mu.Lock()
	w := js.watches[sl]
	js.mu.Unlock()
	if w == nil || w.runIfUntried || !strings.Contains(w.skipNote, "overlap = skip") {
		t.Errorf("a late fire (overlap = skip) claimed by a run elsewhere: watch %+v; want followed up to record its skip", w)
	}
}

// A hole whose read fails as it is to be recorded missed (the store failing at Slot) is followed
// up again, not dropped: a later follow-up records it.
func holeReadFails(t *testing.T, r *claimRig) {
	sl := r.slot(10)
	r.g.mu.Lock()
	r.g.failSlot = true
	r.g.mu.Unlock()
	r.s.holeMissed(context.Background(), r.jb, sl, holeNote)
	r.s.writes.Wait()
	r.want(sl, 0, 0)
	js := r.s.jobs[r.jb.Name]
	js.mu.Lock()
	w := js.watches[sl]
	js.mu.Unlock()
	if w == nil || !w.missed || w.skipNote == "" {
		t.Fatalf("a hole whose read failed is not followed up: %+v", w)
	}
	r.s.holeMissed(context.Background(), r.jb, sl, holeNote) // the follow-up after the hold-off
	r.s.writes.Wait()
	r.want(sl, 0, 1)
}

// catchUp has the node launch a catch-up of slots, as its account does, and waits for it to end.
func (r *claimRig) catchUp(slots ...string) {
	r.s.jobs[r.jb.Name].submit(context.Background(), launch{slots: slots, untried: true, why: whyCatchUp})
	r.s.runs.Wait()
}

// catchUpFailingAtSecondBegin runs a catch-up of slots whose second Begin fails (the store
// failing once the first slot's work runs), as catchUp does.
func (r *claimRig) catchUpFailingAtSecondBegin(slots ...string) {
	running, hold := make(chan struct{}), make(chan struct{})
	r.running, r.hold = running, hold
	go func() {
		<-running // the first slot runs: the next Begin is the second's
		r.g.mu.Lock()
		r.g.failBegin = true
		r.g.mu.Unlock()
		close(hold)
	}()
	r.catchUp(slots...)
	r.running, r.hold = nil, nil
}

// followed fails unless the node follows up each of slots, to run it if untried.
func (r *claimRig) followed(slots ...string) {
	r.t.Helper()
	js := r.s.jobs[r.jb.Name]
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, sl := range slots {
		if w := js.watches[sl]; w == nil || !w.runIfUntried {
			r.t.Fatalf("slot %s, which the catch-up did not reach, is not followed up to run: %+v", sl, w)
		}
	}
}

// followUntilRun has the node follow its slots up (its polls) until each of slots has an attempt
// (20 s at most: a lost lease must expire first).
func (r *claimRig) followUntilRun(slots ...string) {
	r.t.Helper()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.s.followUp(context.Background())
		r.s.runs.Wait()
		r.s.writes.Wait()
		all := true
		for _, sl := range slots {
			a, _ := r.entries(sl)
			all = all && a > 0
		}
		if all {
			return
		}
		if time.Now().After(end) {
			var left []string
			for _, sl := range slots {
				if a, _ := r.entries(sl); a == 0 {
					left = append(left, sl)
				}
			}
			r.t.Fatalf("slots %v not run by the follow-ups", left)
		}
	}
}

// The order of the failure: the catch-up's lease is lost in its first slot (the store does not
// answer its renewals), the guard ends the sequence there, without an error. Its other slots are
// followed up and run once the lease is gone.
func catchUpLosesItsLease(t *testing.T, r *claimRig) {
	a, b, c := r.slot(32), r.slot(31), r.slot(30)
	running := make(chan struct{})
	r.running, r.hold = running, make(chan struct{}) // hold never closed: the work ends as the lease is lost
	go func() {
		<-running // a began: its renewals fail from now on
		r.g.failRenew.Store(true)
	}()
	r.catchUp(a, b, c)
	r.g.failRenew.Store(false)
	r.running, r.hold = nil, nil
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only (its lease lost)", n)
	}
	r.want(a, 1, 0)
	r.followed(b, c)
	r.followUntilRun(b, c)
	r.want(b, 1, 0)
	r.want(c, 1, 0)
}

// The outcome of the catch-up's first slot is not recorded (the store failed at Finish): the guard
// ends the sequence there, without an error; its other slots are followed up and run.
func catchUpOutcomeNotRecorded(t *testing.T, r *claimRig) {
	a, b, c := r.slot(35), r.slot(34), r.slot(33)
	r.g.mu.Lock()
	r.g.failFinish = true
	r.g.mu.Unlock()
	r.catchUp(a, b, c)
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only (its outcome not recorded)", n)
	}
	r.followed(b, c)
	r.followUntilRun(b, c)
	r.want(b, 1, 0)
	r.want(c, 1, 0)
}

// A slot of the catch-up was recorded missed first by another node: the catch-up ends there; the
// slot after it is followed up and run at the next poll, not left to the job's next fire.
func catchUpRestAfterAClaim(t *testing.T, r *claimRig) {
	a, b, c := r.slot(38), r.slot(37), r.slot(36)
	r.record(b)
	r.catchUp(a, b, c)
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only", n)
	}
	r.followed(c)
	r.followUntilRun(c)
	r.want(a, 1, 0)
	r.want(b, 0, 1) // the record stands: not run
	r.want(c, 1, 0)
}

// The store fails at the Begin of the catch-up's second slot: that slot and the one after it are
// left to the job's account before its next fire, as before (a store error's path, which the
// outage tests hold), and run by it.
func catchUpBeginFails(t *testing.T, r *claimRig) {
	a, b, c := r.slot(41), r.slot(40), r.slot(39)
	r.catchUpFailingAtSecondBegin(a, b, c)
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only (the store failed at the next Begin)", n)
	}
	js := r.s.jobs[r.jb.Name]
	if !js.takeAccount() {
		t.Fatal("a catch-up that failed at a Begin is not accounted before the job's next fire")
	}
	r.catchUp(b, c) // what that account queues: the slots it finds behind the newest (holes.go)
	r.want(b, 1, 0)
	r.want(c, 1, 0)
}

// A long catch-up (catch-up-max up to 10,000) ends in its first slot: its rest is more than a
// job follows up at once (maxWatches), and its account, which looks behind the newest slot only
// among the task's newest entries, would not find the older ones. Each is followed up in turn,
// maxWatches at a time, and run: none is left without a record.
func longCatchUpRest(t *testing.T, r *claimRig) {
	slots := make([]string, maxWatches+8)
	for i := range slots {
		slots[i] = r.slot(80 - i) // oldest first, as an account queues them
	}
	r.g.mu.Lock()
	r.g.failFinish = true
	r.g.mu.Unlock()
	r.catchUp(slots...)
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only (its outcome not recorded)", n)
	}
	r.followed(slots[1:maxWatches]...) // the first slot is followed up too: its outcome was not recorded
	// Other slots followed up meanwhile (fires that found the job busy) drop the oldest watches for
	// room: a catch-up's slot among them waits for room again, it is not forgotten.
	js := r.s.jobs[r.jb.Name]
	js.mu.Lock()
	for h := 10; h < 13; h++ {
		js.watchLocked(context.Background(), r.slot(h), false)
	}
	js.mu.Unlock()
	r.followUntilRun(slots[1:]...)
	for _, sl := range slots[1:] {
		r.want(sl, 1, 0)
	}
}

// A long catch-up's lease is taken over between two of its slots (its renewals failed and
// another node took the job meanwhile): the next slot's Begin is refused, a Busy result, and the
// guard ends the sequence there. Its rest is more than a job follows up at once (maxWatches): each
// slot is followed up in turn and run, none forgotten for room. (The busy launch's watches of
// every slot, after, dropped the oldest for room, untried slots of the catch-up left without a
// record.)
func longCatchUpBusyBetweenSlots(t *testing.T, r *claimRig) {
	slots := make([]string, maxWatches+8)
	for i := range slots {
		slots[i] = r.slot(120 - i) // oldest first, as an account queues them
	}
	running, hold := make(chan struct{}), make(chan struct{})
	held, beginning := make(chan struct{}), make(chan struct{})
	r.running, r.hold = running, hold
	go func() {
		<-running // slots[0] runs: the next Begin is slots[1]'s
		r.g.mu.Lock()
		r.g.holdBegin, r.g.beginning = held, beginning
		r.g.mu.Unlock()
		close(hold)
	}()
	go func() {
		defer close(held)
		<-beginning // another node takes the job over, runs nothing, and gives it back
		ctx := context.Background()
		l, err := r.g.Acquire(ctx, store.AcquireRequest{Task: r.jb.Name, Holder: "nodeB", RunID: "nodeB-run", TTL: time.Minute, Replace: true})
		if err == nil {
			err = r.g.Release(ctx, l)
		}
		if err != nil {
			t.Errorf("nodeB could not take the lease over: %v", err)
		}
	}()
	r.catchUp(slots...)
	r.running, r.hold = nil, nil
	if n := r.ran.Load(); n != 1 {
		t.Fatalf("the catch-up ran %d slots; want the first only (busy at the second)", n)
	}
	r.followUntilRun(slots[1:]...)
	for _, sl := range slots {
		r.want(sl, 1, 0)
	}
}

// The node drains before the rest of a long catch-up that ended early is run: those slots have
// no record, and the next start's account looks only behind the task's newest 20 entries, which
// the catch-up's runs fill. The drain says which they are, and what to do (it said nothing).
func drainBeforeTheRest(t *testing.T, r *claimRig) {
	var buf bytes.Buffer
	var mu sync.Mutex
	r.s.log = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	slots := make([]string, maxWatches+8)
	for i := range slots {
		slots[i] = r.slot(160 - i)
	}
	r.g.mu.Lock()
	r.g.failFinish = true
	r.g.mu.Unlock()
	r.catchUp(slots...)
	if err := r.s.drain(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	want := fmt.Sprintf("slots=%d first=%s last=%s", len(slots)-1, slots[1], slots[len(slots)-1])
	if !strings.Contains(out, "level=WARN msg=\"draining: slots of a catch-up that ended early") || !strings.Contains(out, want) {
		t.Fatalf("the drain did not say which slots of the catch-up it left (want %q):\n%s", want, out)
	}
}

// A node ran the first 25 slots of a 40-slot catch-up, then the job's newest fire, and stopped:
// the catch-up's other slots have no record, and the 20 newest entries (the runs just made) are
// all newer than them. Another node's start finds them by their queued marks and runs them; a
// slot of the window that no account marked queued is not a hole (it was never queued), and no
// slot runs twice. The start found none of them before (its holes were looked for only among the
// slots after the oldest of the newest entries).
func restBehindTheNewestEntries(t *testing.T, r *claimRig) {
	ctx := context.Background()
	slots := make([]string, 40)
	for i := range slots {
		slots[i] = r.slot(160 - i)
	}
	unmarked := slots[32]
	r.s.markQueued(ctx, r.jb.Name, slices.DeleteFunc(slices.Clone(slots), func(sl string) bool { return sl == unmarked }))
	r.ranThenStart(slots[:25])
	for _, sl := range slots {
		want := 1
		if sl == unmarked {
			want = 0
		}
		r.want(sl, want, 0)
	}
	r.want(r.slot(0), 1, 0)
	if n := r.ran.Load(); n != int64(len(slots)) {
		t.Fatalf("the work ran %d times; want %d (25 slots, the newest fire, the 14 marked ones left)", n, len(slots))
	}
}

// As restBehindTheNewestEntries, but the rest was run meanwhile under another spelling of the
// same instants (an operator's once backfill in the local zone, as the drain's warning advises):
// the start reads them by Parse in the newest entries, and must not run them again behind them.
func restBehindRunUnderAnotherName(t *testing.T, r *claimRig) {
	ctx := context.Background()
	sp, err := r.jb.Spec()
	if err != nil {
		t.Fatal(err)
	}
	slots := make([]string, 40)
	for i := range slots {
		slots[i] = r.slot(160 - i)
	}
	r.s.markQueued(ctx, r.jb.Name, slots)
	berlin := time.FixedZone("", 3600)
	for _, sl := range slices.Backward(slots[25:]) {
		at, err := sp.Parse(sl)
		if err != nil {
			t.Fatal(err)
		}
		other := at.In(berlin).Format(time.RFC3339)
		if p, err := sp.Parse(other); err != nil || !p.Equal(at) || other == sl {
			t.Fatalf("another spelling of %s: %s, %v", sl, other, err)
		}
		if err := r.follow(other); err != nil {
			t.Fatal(err)
		}
	}
	r.ranThenStart(slots[:25])
	if n := r.ran.Load(); n != int64(len(slots))+1 {
		t.Fatalf("the work ran %d times; want %d: the slots run under another name ran again", n, len(slots)+1)
	}
}

// As restBehindTheNewestEntries, with a rest of 140 marked slots behind 20 fires on time: each
// gets its one record, run or missed. The start counted the first 100 marked slots only, and the
// 40 oldest stayed without a record at every start after (each counted the same 100 first).
func aLongRestBehind(t *testing.T, r *claimRig) {
	slots := make([]string, 140)
	for i := range slots {
		slots[i] = r.slot(170 - i)
	}
	r.s.markQueued(context.Background(), r.jb.Name, slots)
	onTime := make([]string, 20)
	for i := range onTime {
		onTime[i] = r.slot(30 - i)
	}
	s2 := r.ranThenStart(onTime)
	js := s2.jobs[r.jb.Name]
	var ran, missed, watched int
	for _, sl := range slots {
		a, m := r.entries(sl)
		js.mu.Lock()
		w := js.watches[sl]
		js.mu.Unlock()
		switch {
		case a+m == 0 && w != nil && w.missed: // the newest of those beyond catch-up-max: recorded at a poll
			watched++
		case a+m != 1:
			t.Fatalf("slot %s: %d attempts, %d missed events, followed up %v; want one record", sl, a, m, w != nil)
		}
		ran, missed = ran+a, missed+m
	}
	t.Logf("of 140 slots behind: %d ran, %d recorded missed, %d followed up to be", ran, missed, watched)
	if watched > watchedHoles {
		t.Fatalf("%d slots followed up; want at most %d", watched, watchedHoles)
	}
	if n := r.ran.Load(); n != int64(ran+len(onTime)+1) {
		t.Fatalf("the work ran %d times; want %d", n, ran+len(onTime)+1)
	}
}

// ranThenStart runs slots (the first ones of a catch-up) and the job's newest fire on the rig's
// node, which then stops; another node, the job with a catch-up window, starts: its account of
// the job, and the launches that makes, to their end. It returns that node.
func (r *claimRig) ranThenStart(slots []string) *Scheduler {
	r.t.Helper()
	for _, sl := range append(slices.Clone(slots), r.slot(0)) {
		if err := r.follow(sl); err != nil {
			r.t.Fatal(err)
		}
	}
	jb := r.jb
	jb.CatchUp, jb.CatchUpMax = 400*time.Hour, 100
	s2, err := New(Config{Store: r.g, Jobs: []Job{jb}, Node: "nodeB", Poll: 10 * time.Millisecond})
	if err != nil {
		r.t.Fatal(err)
	}
	s2.account(context.Background(), s2.jobs[jb.Name], time.Now())
	s2.runs.Wait()
	s2.writes.Wait()
	return s2
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
