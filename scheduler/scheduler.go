package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Job is one scheduled job: a jobs file's job (package jobfile), or a program's own.
type Job struct {
	jobfile.Job
	// Work, when set, runs instead of Command: a Go function as the guarded work. It must stop
	// when its context is cancelled (a lost lease, a timeout, replace, the end of a drain); Run
	// does not wait for one that has not after its grace (see Run). A panic in it is its attempt's
	// failure (note "the work panicked: " and its value; the stack is logged), as a command's
	// crash is: the node goes on running its jobs. So is a call of runtime.Goexit in it (note
	// once.GoexitNote): Work runs in a goroutine of its own, which the Goexit ends.
	Work once.Work
}

// Config configures a Scheduler. Store and Jobs are required.
type Config struct {
	// Store is the store every node of the fleet shares. Pause, resume, trigger and output tails
	// need it to implement store.Keys (every backend of this module does).
	Store store.Store
	// Jobs are the jobs to run; names must be unique (see Reload).
	Jobs []Job
	// Node names this node in leases and history (the holder of its runs); default
	// once.DefaultHolder() (user@hostname:pid).
	Node string
	// Logger receives the scheduler's lines and the guard's; nil discards them.
	Logger *slog.Logger
	// LockDir, when set, adds the guard's kernel file lock (once.Options.LockDir) to every run.
	LockDir string
	// MaxClockOffset is the largest difference between this node's clock and the store's at which
	// it still fires; default 2s. Stores without a clock (etcd) are trusted as this node's.
	MaxClockOffset time.Duration
	// Drain is how long running jobs get to finish when Run's context is cancelled, before they
	// are stopped (SIGTERM, then SIGKILL after their grace); default 5m.
	Drain time.Duration
	// Grace is a job's grace when it gives none; default 10s.
	Grace time.Duration
	// Poll is how often the node reads pause and trigger requests and follows up the slots it
	// watches; default 2s.
	Poll time.Duration
	// Env, when set, adds variables to every command's environment (the once command adds
	// ONCE_STORE there), after the job's own.
	Env func() []string
	// Shim is the argv prefix that runs the supervision shim (job.Job.Shim); nil is the default.
	Shim []string
	// LogDir, when set, keeps each job's full output in LogDir/NAME.log, rotated at LogSize.
	LogDir string
	// LogSize is the size at which a job's log file is rotated (3 old files kept); default 10 MiB.
	LogSize int64
	// TailSize is how many bytes of each attempt's output are kept in the store (at most the last
	// store.MaxKeyResult, what every store keeps with a key); default 64 KiB,
	// negative keeps none.
	TailSize int
	// Resolve, when set, returns the commands a person runs to decide a slot that needs review,
	// for log lines and notifications.
	Resolve func(task, slot string) *notify.Resolve
	// TracerProvider, when set, receives the guard's spans of every launch: one per attempt (and per
	// review), each the root of its trace (once.Options.TracerProvider); nil makes none.
	TracerProvider trace.TracerProvider
	// Now is this node's clock; nil is time.Now. Tests set it.
	Now func() time.Time
}

// Scheduler runs jobs on one node of a fleet. Create it with New, then call Run once.
type Scheduler struct {
	c      Config
	logMu  sync.Mutex
	logDir *os.Root   // Config.LogDir, opened once it could be (logRoot)
	keys   store.Keys // nil when the store keeps no keys
	log    *slog.Logger
	out    *notify.Sender
	clock  *clock

	// Lock order: mu before a jobState's mu; ctlMu is taken alone.
	mu       sync.Mutex
	jobs     map[string]*jobState
	order    []string    // job names, in the order given
	retired  []*jobState // removed by a reload while a launch of theirs ran: drain waits for them too
	ctlMu    sync.Mutex
	paused   map[string]store.Key // under ctlMu
	crowded  map[string]int       // under ctlMu: by control scope, polls left that look names up without a walk
	draining atomic.Bool
	// settled: the drain's launches ended and it made the records it owed (recordOwed); a record
	// that fails from then on is not followed up by anyone.
	settled  atomic.Bool
	ran      atomic.Bool             // Run was called
	halt     context.CancelCauseFunc // ends Run's context with a cause (haltAhead); set by Run
	haltOnce sync.Once
	wake     chan struct{}  // the dispatcher looks again (a reload)
	hurry    chan struct{}  // closed by Hurry: the drain stops running jobs now
	runs     sync.WaitGroup // launches
	writes   sync.WaitGroup // store writes off the dispatcher (background)
	leases   leaseView      // the fleet's leases, as the newest read showed them (recentLeases)

	stats statsCounters
}

// New checks the configuration and the jobs; nothing runs until Run.
func New(c Config) (*Scheduler, error) {
	if c.Store == nil {
		return nil, fmt.Errorf("%w: scheduler: no Config.Store", once.ErrInvalid)
	}
	if c.Node == "" {
		c.Node = once.DefaultHolder()
	}
	if err := store.CheckName("Config.Node", c.Node, store.MaxHolderLen); err != nil {
		return nil, fmt.Errorf("%w: %w", once.ErrInvalid, err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	defaults(&c)
	s := &Scheduler{c: c, log: c.Logger, jobs: map[string]*jobState{}, paused: map[string]store.Key{},
		wake: make(chan struct{}, 1), hurry: make(chan struct{})}
	s.keys, _ = c.Store.(store.Keys)
	s.out = notify.New(notify.Options{Logger: c.Logger})
	s.clock = newClock(c.Store, c.Now, c.MaxClockOffset)
	if err := s.Reload(c.Jobs); err != nil {
		return nil, err
	}
	if c.LogDir != "" {
		if _, err := s.logRoot(); err != nil { // opened now: later, its path could name another
			s.log.Warn("cannot open the log directory; jobs' output is kept only as the tail in the store until it can be", "dir", c.LogDir, "err", err)
		}
	}
	return s, nil
}

func defaults(c *Config) {
	if c.MaxClockOffset <= 0 {
		c.MaxClockOffset = 2 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.LogSize <= 0 {
		c.LogSize = 10 << 20
	}
	if c.TailSize == 0 {
		c.TailSize = 64 << 10
	}
	// What a store keeps; the ring is allocated per launch, so more would only cost memory (a
	// --tail-size of 99999999999 ran the daemon out of memory at its first launch).
	c.TailSize = min(c.TailSize, store.MaxKeyResult)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Reload replaces the jobs. A job whose name is kept keeps its state: an attempt it runs now
// goes on under the old definition, and a changed schedule applies from its next slot. A removed
// job fires no more; an attempt of it that runs now finishes. An added job is accounted at its
// next fire time, as on start (see Run): with no history it starts from that slot; with one (a
// job removed and put back) the slots since its newest are caught up or recorded missed. A bad job (an unparsable schedule, a name given twice, a field out of the bounds a jobs
// file holds it to: jobfile.Job.Check) refuses the whole list and keeps the jobs as they were; its
// error wraps once.ErrInvalid.
func (s *Scheduler) Reload(jobs []Job) error {
	specs := make([]slot.Spec, len(jobs))
	seen := make(map[string]bool, len(jobs))
	for i, j := range jobs {
		if j.Name == "" { // ValidateTask's message names once.Options.Task
			return fmt.Errorf("%w: job %d of %d has no name: set Job.Name (letters, digits and . _ : @ / -)", once.ErrInvalid, i+1, len(jobs))
		}
		if err := once.ValidateTask(j.Name); err != nil {
			return fmt.Errorf("job %d: %w", i+1, err)
		}
		if seen[j.Name] {
			return fmt.Errorf("%w: job %q is given twice", once.ErrInvalid, j.Name)
		}
		seen[j.Name] = true
		if err := j.Check(); err != nil {
			return fmt.Errorf("%w: job %q: %w", once.ErrInvalid, j.Name, err)
		}
		if len(j.Command) == 0 && j.Work == nil {
			return fmt.Errorf("%w: job %q has neither Command nor Work", once.ErrInvalid, j.Name)
		}
		sp, err := j.Spec()
		if err != nil {
			return fmt.Errorf("%w: job %q: %w", once.ErrInvalid, j.Name, err)
		}
		if sp.Kind() != slot.KindSchedule {
			return fmt.Errorf("%w: job %q has no schedule", once.ErrInvalid, j.Name)
		}
		specs[i] = sp
	}
	now := s.clock.now()
	s.mu.Lock()
	old := s.jobs
	s.jobs = make(map[string]*jobState, len(jobs))
	s.order = s.order[:0]
	for i, j := range jobs {
		js := old[j.Name]
		if js == nil {
			// Added while Run runs: accounted before its first fire, as every job is on start. A
			// job put back (a jobs file seen mid-write, truncated; a drop-in an editor renamed
			// away for a moment) has a history, and the slots it missed while gone are caught up
			// or recorded missed; one with none starts from its next slot, as before (see below).
			js = &jobState{s: s, watches: map[string]*watch{}, needAccount: s.ran.Load()}
		}
		added := js.next.Value == "" && js.needAccount
		js.mu.Lock()
		changed := js.spec.String() != specs[i].String() || js.job.Jitter != j.Jitter
		js.job, js.spec = j, specs[i]
		if changed || js.next.Value == "" {
			js.next = nextFire(j.Name, specs[i], j.Jitter, now)
		}
		if changed {
			js.failedFrom, js.failed = time.Time{}, nil // slots of the old schedule: not the new one's to account
			js.gen++
		}
		if added {
			// The account at its first fire stands in for that fire: with no history it would
			// return and the slot would not run, nor be recorded (a daily job added at 02:59
			// first ran the next day). Its gap starts at that slot, as for a failed launch.
			js.failedFrom = js.next.Start
		}
		js.mu.Unlock()
		s.jobs[j.Name] = js
		s.order = append(s.order, j.Name)
		delete(old, j.Name)
	}
	for _, js := range old {
		js.mu.Lock()
		if len(js.actives) > 0 {
			s.retired = append(s.retired, js)
		}
		js.removeLocked()
		js.mu.Unlock()
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Run schedules the jobs until ctx is cancelled, then drains: no new slot fires, running jobs get
// Config.Drain to finish and are then stopped through their stop path (their outcomes are
// recorded, so their slots follow the usual rules on the other nodes). It returns nil after a
// drain, or the error that kept it from starting (the store unreachable). A job's Work that has
// not returned its grace (Job.Grace, else Config.Grace) after its context was cancelled cannot be
// stopped: Run then returns an error naming it and leaves it running; its attempt stays running
// and its lease held until it returns or the process exits (then the attempt is unknown). Run
// runs once: a second call returns an error wrapping once.ErrInvalid at once.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.ran.Swap(true) {
		// After a drain nothing starts any more: a second Run would fire nothing, silently.
		return fmt.Errorf("%w: scheduler: Run was called again; a Scheduler runs once: make a new one with New", once.ErrInvalid)
	}
	ctx, halt := context.WithCancelCause(ctx)
	defer halt(nil)
	s.halt = halt // before any goroutine that may call it starts
	s.checkClock(ctx, true)
	s.pollControl(ctx)
	now := s.clock.now()
	for _, js := range s.snapshot() {
		js.mu.Lock() // the next fires were computed before the store's clock was read
		js.next = nextFire(js.job.Name, js.spec, js.job.Jitter, now)
		js.mu.Unlock()
		s.account(ctx, js, now)
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); s.background(ctx) }()
	go func() { defer bg.Done(); s.dispatch(ctx) }()
	<-ctx.Done()
	bg.Wait()
	err := s.drain()
	s.writes.Wait()
	s.out.Wait(5 * time.Second)
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, store.ErrSchemaAhead) {
		return cause
	}
	return err
}

// checkSchema reads the store's schema version at each poll (store.SchemaChecker): a newer once
// that upgraded the store since this node opened it stops the node (haltAhead). Other errors are
// the poll's other reads' to report.
func (s *Scheduler) checkSchema(ctx context.Context) {
	if sc, ok := s.c.Store.(store.SchemaChecker); ok {
		if err := sc.CheckSchema(ctx); errors.Is(err, store.ErrSchemaAhead) {
			s.haltAhead(err)
		}
	}
}

// haltAhead stops the node on a store whose schema a newer once upgraded (err wraps
// store.ErrSchemaAhead): nothing more fires and Run drains and returns err. The store refuses
// every write from then on, so what runs now ends without its outcome recorded (unknown).
func (s *Scheduler) haltAhead(err error) {
	s.haltOnce.Do(func() {
		s.log.Error("the store's schema was upgraded by a newer once: this node fires nothing more and stops; restart it with the newer once", "err", err)
	})
	if s.halt != nil {
		s.halt(err)
	}
}

// removeLocked marks a job a reload removed: it fires no more, and what waited of it (its queue,
// the slots it followed) is dropped, said as a drain says it.
func (js *jobState) removeLocked() {
	js.removed = true
	if len(js.queue)+len(js.watches)+len(js.rest) > 0 {
		var slots []string
		for _, l := range js.queue {
			slots = append(slots, l.slots...)
		}
		for sl := range js.watches {
			slots = append(slots, sl)
		}
		js.s.log.Info("reload: the job was removed; its queued and followed slots are dropped (a later reload that adds it back records them missed)",
			"task", js.job.Name, "slots", slots, "rest", len(js.rest))
	}
	js.queue = nil
	js.watches, js.rest = map[string]*watch{}, nil
}

// Node is the name this node runs its jobs under.
func (s *Scheduler) Node() string { return s.c.Node }

// Hurry ends a drain's wait: running jobs are stopped now (a second stop signal).
func (s *Scheduler) Hurry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.hurry:
	default:
		close(s.hurry)
	}
}

// snapshot is the current jobs, in their order.
func (s *Scheduler) snapshot() []*jobState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*jobState, 0, len(s.order))
	for _, n := range s.order {
		out = append(out, s.jobs[n])
	}
	return out
}

// background reads the store's clock, pause and trigger requests, and follows up watched slots,
// every Poll (the clock every 10 Polls); each step within storeStepTimeout.
func (s *Scheduler) background(ctx context.Context) {
	t := time.NewTicker(s.c.Poll)
	defer t.Stop()
	var tidied time.Time
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if i%10 == 0 {
			s.checkClock(ctx, false)
		}
		// Each step bounded (storeStepTimeout): a connection the store stopped answering on
		// must not hold the loop, and with it pauses, triggers, follow-ups and a drain.
		step(ctx, s.checkSchema)
		step(ctx, s.pollControl)
		step(ctx, s.followUp)
		s.retryAccounts(ctx) // each account is bounded by itself
		if now := s.clock.now(); now.Sub(tidied) > time.Hour {
			tidied = now
			step(ctx, func(ctx context.Context) { s.tidy(ctx, now) })
		}
	}
}

// checkClock measures the offset to the store's clock and logs it at start and whenever this
// node starts or stops refusing to fire because of it.
func (s *Scheduler) checkClock(ctx context.Context, start bool) {
	_, wasOK := s.clock.state()
	err := s.clock.check(ctx)
	switch {
	case errors.Is(err, errNoClock):
		if start {
			s.log.Info("the store has no clock: slots are due by this node's clock; keep the nodes' clocks in sync (NTP)")
		}
		return
	case err != nil:
		if !stopping(ctx) {
			s.log.Warn("cannot read the store's clock; keeping the last offset", "err", err)
		}
		return
	}
	off, ok := s.clock.state()
	switch {
	case !ok && (wasOK || start):
		s.log.Error("this node's clock is off from the store's by more than the limit: it fires nothing until fixed (NTP)",
			"offset", off.String(), "max", s.c.MaxClockOffset.String())
	case ok && !wasOK:
		s.log.Info("this node's clock agrees with the store's again: firing", "offset", off.String())
	case start:
		s.log.Info("clock offset to the store", "offset", off.String())
	}
}

// Retention of the scheduler's business keys: the claims that make a missed or paused slot
// recorded once (needed only while the nodes that race for it run), and output tails.
const (
	recordedRetention = 48 * time.Hour
	// TailRetention is how long an attempt's output tail is kept in the store.
	TailRetention = 30 * 24 * time.Hour
)

// tidy forgets the scheduler's keys past their retention; every node does it, harmlessly.
func (s *Scheduler) tidy(ctx context.Context, now time.Time) {
	if s.keys == nil {
		return
	}
	for scope, keep := range map[string]time.Duration{recordedScope: recordedRetention, OutputScope: TailRetention} {
		if _, err := s.keys.Forget(ctx, scope, now.Add(-keep), true); err != nil && !stopping(ctx) {
			s.log.Warn("cannot forget old scheduler keys", "scope", scope, "err", err)
		}
	}
}
