// Package storeflow is the seed's story as a program: a chain of stores syncs each day's uploaded
// flows into an orders table. One night the run dies two thirds of the way through; cron and a
// catch-up service both launch it again at once; a person reviews and re-runs it; someone even runs
// it by hand twice, unguarded. With the flow id claimed by package keys in the same transaction as
// the order, and the job guarded by once.Do, the table ends with exactly one order per flow.
//
// The orders table deliberately has no unique index on flow_id (the seed's schema could not be
// changed), so a duplicate would be visible: Count reports rows and distinct flows.
package storeflow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/keys"
	"github.com/once-run/once/store"
)

// Flow is one uploaded sales flow; ID is its stable business key.
type Flow struct {
	ID          string
	Store       int
	AmountCents int64
}

// Flows returns n deterministic flows of day.
func Flows(day string, n int) []Flow {
	out := make([]Flow, n)
	for i := range out {
		out[i] = Flow{ID: fmt.Sprintf("%s/flow-%05d", day, i+1), Store: 1 + i%17, AmountCents: int64(1000 + (i*7919)%50000)}
	}
	return out
}

// Crash is a point in a batch's transaction where a run can die.
type Crash int

// Crash points, in transaction order.
const (
	NoCrash              Crash = iota
	BeforeClaim                // transaction open, nothing done
	BetweenClaimAndWrite       // keys claimed, orders not written
	AfterWrite                 // orders written, not committed
	AfterCommit                // batch committed, next batch not started
)

// String names the crash point as the docs do.
func (c Crash) String() string {
	return [...]string{"none", "before the claim", "between claim and write", "after the write", "after the commit"}[c]
}

// Crashed is the panic value of an injected crash.
type Crashed struct {
	At  Crash
	Row int
}

// Error says where the run crashed.
func (c Crashed) Error() string { return fmt.Sprintf("crashed %s at row %d", c.At, c.Row) }

// Shop is the orders database and how the sync job uses it.
type Shop struct {
	DB      *sql.DB
	Dialect keys.Dialect
	Keys    *keys.Keys
	// Batch is the number of flows per transaction; default 100.
	Batch int
	// Checkpoint makes Sync resume after the last committed batch (keys.SaveCheckpoint). Without
	// it every run starts from the first flow and the claims alone skip what is done.
	Checkpoint bool
	// Crash, when set, panics with Crashed at that point of the transaction holding flow CrashAt
	// (1-based), after rolling the transaction back as a dying connection would.
	Crash   Crash
	CrashAt int
	// Naive skips the claims: the seed's job, to show what the claims prevent.
	Naive bool
	// Orders is the orders table; default "orders".
	Orders string
}

func (s *Shop) orders() string {
	if s.Orders == "" {
		return "orders"
	}
	return s.Orders
}

// Scope is the keys scope of order flows.
const Scope = "orders"

// Setup creates the orders table (no unique index, like the seed's) and the keys tables.
func (s *Shop) Setup(ctx context.Context) error {
	var ddl string
	switch s.Dialect {
	case keys.Postgres:
		ddl = `CREATE TABLE IF NOT EXISTS ` + s.orders() + ` (id bigserial PRIMARY KEY, flow_id text NOT NULL, store int NOT NULL, amount_cents bigint NOT NULL)`
	case keys.MySQL:
		ddl = `CREATE TABLE IF NOT EXISTS ` + s.orders() + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, flow_id VARCHAR(64) NOT NULL, store INT NOT NULL, amount_cents BIGINT NOT NULL)`
	default:
		ddl = `CREATE TABLE IF NOT EXISTS ` + s.orders() + ` (id INTEGER PRIMARY KEY, flow_id TEXT NOT NULL, store INTEGER NOT NULL, amount_cents INTEGER NOT NULL)`
	}
	if _, err := s.DB.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("create orders: %w", err)
	}
	return s.Keys.Ensure(ctx, keys.SQL(s.DB))
}

// Count returns the number of orders and of distinct flows among them.
func (s *Shop) Count(ctx context.Context) (rows, distinct int, err error) {
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT flow_id) FROM `+s.orders()).Scan(&rows, &distinct)
	return rows, distinct, err
}

// Sync writes one order per flow not yet claimed, a batch per transaction: claim the batch's flow
// ids, insert orders for the new ones, save the checkpoint, commit. It returns the orders written.
func (s *Shop) Sync(ctx context.Context, task, slot string, flows []Flow) (written int, err error) {
	batch := s.Batch
	if batch <= 0 {
		batch = 100
	}
	start := 0
	if s.Checkpoint {
		v, ok, err := s.Keys.LoadCheckpoint(ctx, keys.SQL(s.DB), task, slot)
		if err != nil {
			return 0, err
		}
		if ok {
			if start, err = strconv.Atoi(v); err != nil {
				return 0, fmt.Errorf("checkpoint %q is not a flow index: %w", v, err)
			}
		}
	}
	for lo := start; lo < len(flows); lo += batch {
		part := flows[lo:min(lo+batch, len(flows))]
		n, err := s.syncBatch(ctx, task, slot, lo, part)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func (s *Shop) syncBatch(ctx context.Context, task, slot string, lo int, part []Flow) (int, error) {
	crash := func(at Crash) {
		if s.Crash == at && s.CrashAt > lo && s.CrashAt <= lo+len(part) {
			panic(Crashed{At: at, Row: s.CrashAt})
		}
	}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit; on a crash the server does it
	crash(BeforeClaim)
	ids := make([]string, len(part))
	for i, f := range part {
		ids[i] = f.ID
	}
	fresh := make([]bool, len(ids))
	if s.Naive {
		for i := range fresh {
			fresh[i] = true
		}
	} else if fresh, err = s.Keys.Claim(ctx, keys.SQL(tx), Scope, ids...); err != nil {
		return 0, err
	}
	crash(BetweenClaimAndWrite)
	var q strings.Builder
	var args []any
	q.WriteString("INSERT INTO " + s.orders() + " (flow_id, store, amount_cents) VALUES ")
	for i, f := range part {
		if !fresh[i] {
			continue
		}
		if len(args) > 0 {
			q.WriteByte(',')
		}
		if s.Dialect == keys.Postgres {
			fmt.Fprintf(&q, "($%d,$%d,$%d)", len(args)+1, len(args)+2, len(args)+3)
		} else {
			q.WriteString("(?,?,?)")
		}
		args = append(args, f.ID, f.Store, f.AmountCents)
	}
	n := len(args) / 3
	if n > 0 {
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return 0, fmt.Errorf("insert orders: %w", err)
		}
	}
	crash(AfterWrite)
	if s.Checkpoint {
		if err := s.Keys.SaveCheckpoint(ctx, keys.SQL(tx), task, slot, strconv.Itoa(lo+len(part))); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	crash(AfterCommit)
	return n, nil
}

// Story configures Run.
type Story struct {
	Shop  *Shop
	Guard store.Store // the once store of the guard (any backend)
	// Machine opens another handle on Guard's ledger: the nightly run's machine's own, closed when
	// that machine dies (its connections die with it). Required.
	Machine func(context.Context) (store.Store, error)
	Task    string    // default "store-flow-sync"
	Day     string    // the slot; default "2026-11-29"
	Flows   int       // default 3000
	Log     io.Writer // narration; nil discards
}

// Report is what happened in each act of the story.
type Report struct {
	Crashed     *Crashed        // act 1: the run that died (nil if no crash was injected)
	Launches    []once.Decision // act 2: "cron" and "catch-up" at once
	Rerun       []once.Decision // act 3: after review, launched twice at once again
	RerunWrote  int             // orders written by act 3
	ByHandWrote int             // act 4: two unguarded runs by hand at once
	Rows        int             // orders at the end
	Distinct    int             // distinct flows among them
}

// Run plays the story: a guarded run that crashes as st.Shop says, two concurrent launches, a
// review that resolves the slot as failed and a re-run launched twice at once, then two unguarded
// runs by hand. It returns an error only when something other than an injected crash fails.
func Run(ctx context.Context, st Story) (rep Report, err error) {
	if st.Task == "" {
		st.Task = "store-flow-sync"
	}
	if st.Day == "" {
		st.Day = "2026-11-29"
	}
	if st.Flows == 0 {
		st.Flows = 3000
	}
	p := &play{st: st, shop: *st.Shop, flows: Flows(st.Day, st.Flows), rep: &rep}
	p.opts = once.Options{Store: st.Guard, Task: st.Task, Slot: st.Day, TTL: 5 * time.Second}
	if err := p.shop.Setup(ctx); err != nil {
		return rep, err
	}
	for _, act := range []func(context.Context) error{p.nightly, p.reboot, p.review, p.byHand} {
		if err := act(ctx); err != nil {
			return rep, err
		}
	}
	if rep.Rows, rep.Distinct, err = p.shop.Count(ctx); err != nil {
		return rep, err
	}
	p.say("end: %d orders, %d distinct flows, %d duplicates", rep.Rows, rep.Distinct, rep.Rows-rep.Distinct)
	return rep, nil
}

// play is the state of one telling of the story.
type play struct {
	st          Story
	shop, clean Shop // clean: the same shop, no crash injected
	flows       []Flow
	opts        once.Options
	wrote       sync.Map // who → orders written
	rep         *Report
}

func (p *play) say(format string, a ...any) {
	if p.st.Log != nil {
		fmt.Fprintf(p.st.Log, format+"\n", a...)
	}
}

func (p *play) job(s *Shop, who string) once.Work {
	return func(ctx context.Context, run *once.Run) error {
		n, err := s.Sync(ctx, run.Task, run.Slot, p.flows)
		p.wrote.Store(who, n)
		return err
	}
}

// nightly is act 1: 02:00, the nightly run; the machine dies mid-run. The death is played where
// the crash is injected: the machine's own handle on the ledger is closed, as a dead process's
// connections are, and the run's goroutine ends (runtime.Goexit). The guard notices the work did
// not return and tries to record it as failed, but nothing of the machine reaches the ledger any
// more: the attempt is left running without a holder and the lease runs out by itself (a short
// TTL), which the next launch finds. The deferred calls still run: the orders transaction is
// rolled back, as the server does for a dead client, and the local lock is given back, as the
// kernel does for a dead process. (Goexit alone would not do: the guard records a work that calls
// it, or panics, as a failed attempt, which is a crash it saw, not a death.)
func (p *play) nightly(ctx context.Context) (err error) {
	if p.st.Machine == nil {
		return errors.New("act 1: Story.Machine is required")
	}
	m, err := p.st.Machine(ctx)
	if err != nil {
		return fmt.Errorf("act 1: the machine's store: %w", err)
	}
	defer m.Close() //nolint:errcheck // closed already when the machine died
	o := p.opts
	o.Store, o.TTL = m, machineTTL
	done := make(chan struct{})
	go func() {
		defer close(done)
		var res once.Result
		res, err = once.Do(ctx, o, p.dying(m, p.job(&p.shop, "nightly")))
		if err == nil && res.WorkErr != nil {
			err = res.WorkErr
		}
	}()
	<-done
	if err != nil {
		return fmt.Errorf("act 1: %w", err)
	}
	rows, _, _ := p.shop.Count(ctx)
	p.say("act 1: nightly run: %v; %d orders in the table", p.rep.Crashed, rows)
	return nil
}

// machineTTL is the lease of the machine that dies: the reboot waits it out, so it is shorter than
// the story's 5s, but not so short that a loaded host (CI's -race -p 4 on two cores) misses a
// renewal while the run is alive: a renewal must land within TTL/3, and 1s lost act 1's lease
// ("context canceled") in about a third of the runs there.
const machineTTL = 3 * time.Second

// dying is w whose injected crash (a Crashed panic) kills the machine instead: its store handle m
// is closed and the goroutine ends.
func (p *play) dying(m store.Store, w once.Work) once.Work {
	return func(ctx context.Context, run *once.Run) error {
		defer func() {
			if r := recover(); r != nil {
				c, ok := r.(Crashed)
				if !ok {
					panic(r)
				}
				p.rep.Crashed = &c
				_ = m.Close()
				runtime.Goexit()
			}
		}()
		return w(ctx, run)
	}
}

// awaitExpiry waits until the dead machine's lease has run out: the reboot.
func (p *play) awaitExpiry(ctx context.Context) error {
	for {
		ls, err := p.st.Guard.Leases(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ls, func(l store.Lease) bool { return l.Task == p.st.Task }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// launch starts the guarded job twice at the same moment, as cron and the catch-up service.
func (p *play) launch(ctx context.Context, act string, o once.Options) ([]once.Decision, error) {
	var wg sync.WaitGroup
	ds := make([]once.Decision, 2)
	errs := make([]error, 2)
	for i, who := range []string{"cron", "catch-up"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := o
			o.Holder = who
			res, err := once.Do(ctx, o, p.job(&p.clean, act+who))
			ds[i], errs[i] = res.Decision, errors.Join(err, res.WorkErr)
			p.say("%s: %-8s -> %s %s", act, who, res.Decision, res.Reason)
		}()
	}
	wg.Wait()
	return ds, errors.Join(errs...)
}

// reboot is act 2: after the reboot, cron and the catch-up service launch the job at the same moment.
func (p *play) reboot(ctx context.Context) (err error) {
	p.clean = p.shop // the shop as act 1 left it
	p.clean.Crash = NoCrash
	if err := p.awaitExpiry(ctx); err != nil {
		return fmt.Errorf("act 2: waiting for the dead machine's lease to run out: %w", err)
	}
	p.rep.Launches, err = p.launch(ctx, "act 2", p.opts)
	return err
}

// review is act 3: a person reviews the unknown attempt, resolves it as failed (the claims make a
// re-run harmless) and re-runs; cron fires at the same time again.
func (p *play) review(ctx context.Context) (err error) {
	if p.rep.Crashed != nil {
		if _, err := p.st.Guard.Resolve(ctx, store.ResolveRequest{Task: p.st.Task, Slot: p.st.Day, As: store.Failed,
			By: "reviewer", Note: "died mid-run; orders are claimed per flow, re-run is safe"}); err != nil {
			return fmt.Errorf("act 3: resolve: %w", err)
		}
		p.say("act 3: reviewer resolved %s/%s as failed", p.st.Task, p.st.Day)
	}
	o3 := p.opts
	o3.MinHold = time.Second // the winner keeps the lease while the other launch knocks
	if p.rep.Rerun, err = p.launch(ctx, "act 3", o3); err != nil {
		return err
	}
	p.wrote.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), "act 3") {
			p.rep.RerunWrote += v.(int)
		}
		return true
	})
	p.say("act 3: the re-run wrote %d orders", p.rep.RerunWrote)
	return nil
}

// byHand is act 4: two people run the sync by hand, without the guard and from the first flow.
func (p *play) byHand(ctx context.Context) error {
	byHand := p.clean
	byHand.Checkpoint = false
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 2 {
		wg.Go(func() {
			n, err := byHand.Sync(ctx, p.st.Task, p.st.Day, p.flows)
			mu.Lock()
			p.rep.ByHandWrote += n
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("act 4: %w", err)
	}
	p.say("act 4: two unguarded runs by hand wrote %d orders", p.rep.ByHandWrote)
	return nil
}
