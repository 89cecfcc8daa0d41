package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// TestAcquireChurnFenced: contenders on their own sessions acquire one task over and over, each
// holder writing the ledger with its token. In every case: an Acquire's token is its node's
// czxid and newer than every token returned before; the document's writes, in ZooKeeper's order,
// never go back to an older token; a write with a token older than one an Acquire returned is
// refused. held: a TTL nobody outlives, no two holders ever at once and every holder's write is
// accepted. noise: the same, with nodes of crashed contenders (expired) created and deleted
// beside, so that a holder's listing often finds the task node's pzxid a delete's
// (publishAlone's second publish). expiring: a TTL holders outlive, so that others clear their
// nodes and take over while they still run.
func TestAcquireChurnFenced(t *testing.T) {
	for _, c := range []struct {
		name  string
		ttl   time.Duration
		noise int
	}{{"held", time.Minute, 0}, {"noise", time.Minute, 2}, {"expiring", 30 * time.Millisecond, 1}} {
		t.Run(c.name, func(t *testing.T) { churn(t, c.ttl, c.noise) })
	}
}

func churn(t *testing.T, ttl time.Duration, noise int) {
	const workers, rounds = 5, 60
	ctx := ctxT(t, 3*time.Minute)
	dsn := withPrefix(t)
	var (
		holding atomic.Int32
		latest  atomic.Int64 // the newest token an Acquire returned
		granted atomic.Int32
		stale   atomic.Int32 // stale writes tried (each must be refused)
		refused atomic.Int32 // holders' writes refused (expiring only)
		mu      sync.Mutex
		order   []int64 // tokens of the accepted writes (write checks their order in the document)
		errs    = make(chan error, workers)
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		noiseWG sync.WaitGroup
	)
	open := func() *Store {
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	first := open()
	if l, err := first.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err) // makes the task's node: the noise needs it
	} else if err := first.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	for range noise {
		s := open()
		data, _ := json.Marshal(nodeData{Holder: "crashed", RunID: "x", TTL: 1})
		noiseWG.Add(1)
		go func() {
			defer noiseWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := s.c.Create(s.taskPath("job")+"/n-", data, zk.FlagEphemeral|zk.FlagSequence, s.acl)
				if err == nil {
					_ = s.c.Delete(p, -1)
				}
			}
		}()
	}
	for w := range workers {
		s := open()
		k := kv{s}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				var old int64 // this worker's previous token
				for i := 0; i < rounds; i++ {
					if old > 0 && latest.Load() > old {
						// A newer grant was returned: its fence is published; old is stale.
						stale.Add(1)
						if err := write(ctx, k, old, &mu, &order); !errors.Is(err, store.ErrNotHeld) {
							return fmt.Errorf("worker %d: a stale write with token %d (latest %d): %v", w, old, latest.Load(), err)
						}
						old = 0
					}
					l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: fmt.Sprint("h", w), RunID: fmt.Sprint("r", w, i), TTL: ttl})
					var busy *store.BusyError
					if errors.As(err, &busy) || ttl < time.Minute && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrUnavailable)) {
						continue // busy, or (a TTL of a few round trips) our node cleared as expired before the publish
					}
					if err != nil {
						return fmt.Errorf("worker %d: %w", w, err)
					}
					if n := holding.Add(1); n != 1 && ttl >= time.Minute {
						return fmt.Errorf("worker %d: %d holders at once (token %d)", w, n, l.Token)
					}
					granted.Add(1)
					superseded := false
					for {
						prev := latest.Load()
						if l.Token <= prev && ttl >= time.Minute {
							return fmt.Errorf("worker %d: token %d after %d", w, l.Token, prev)
						}
						if l.Token <= prev {
							// expiring: this grant lapsed, and a newer one was made and returned, before
							// this Acquire returned (a stall of more than the 30 ms TTL under a loaded
							// clean-clone run). Its fence is published: this token must not write.
							if err := write(ctx, k, l.Token, &mu, &order); !errors.Is(err, store.ErrNotHeld) {
								return fmt.Errorf("worker %d: token %d returned after %d, and its write: %v", w, l.Token, prev, err)
							}
							superseded = true
							break
						}
						if latest.CompareAndSwap(prev, l.Token) {
							break
						}
					}
					if superseded {
						stale.Add(1)
						holding.Add(-1)
						if err := s.Release(ctx, l); err != nil && !errors.Is(err, store.ErrNotHeld) {
							return fmt.Errorf("worker %d: %w", w, err)
						}
						continue
					}
					if _, _, st, err := s.find(ctx, l); err != nil && ttl >= time.Minute || err == nil && st.Czxid != l.Token {
						return fmt.Errorf("worker %d: token %d, its node %+v (%v)", w, l.Token, st, err)
					}
					if ttl < time.Minute && rand.IntN(2) == 0 {
						time.Sleep(2 * ttl) // outlive the grant: another may take over
					}
					err = write(ctx, k, l.Token, &mu, &order)
					if errors.Is(err, store.ErrNotHeld) && ttl < time.Minute {
						refused.Add(1)
					} else if err != nil {
						return fmt.Errorf("worker %d: the holder's write with token %d: %w", w, l.Token, err)
					}
					holding.Add(-1)
					if err := s.Release(ctx, l); err != nil && (ttl >= time.Minute || !errors.Is(err, store.ErrNotHeld)) {
						return fmt.Errorf("worker %d: %w", w, err)
					}
					old = l.Token
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(stop)
	noiseWG.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if granted.Load() < workers {
		t.Fatalf("only %d grants", granted.Load())
	}
	t.Logf("%d grants, %d accepted writes, %d holders' writes refused, %d stale writes refused", granted.Load(), len(order), refused.Load(), stale.Load())
}

// write appends an event with token to the stress document (one fenced, versioned Save, read
// again when another write came between) and, once accepted, its token to order; accepted after
// a write with a newer token (in the document), it fails.
func write(ctx context.Context, k kv, token int64, mu *sync.Mutex, order *[]int64) error {
	for {
		d, ver, now, err := k.Load(ctx, "job", "s")
		if err != nil {
			return err
		}
		if d == nil {
			d = &kvstore.Doc{Task: "job", Slot: "s"}
		}
		var newer int64 // the newest token the document has
		for _, e := range d.Events {
			newer = max(newer, e.Token)
		}
		d.Events = append(d.Events, kvstore.Event{Kind: store.Skipped, Token: token, At: now})
		if len(d.Events) > 30 { // under the archive's threshold: the oldest go
			d.Events = d.Events[len(d.Events)-30:]
		}
		_, err = k.Save(ctx, d, ver, token, "")
		if errors.Is(err, kvstore.ErrStale) {
			continue // another write came between the read and this one
		}
		if err != nil {
			return err
		}
		if newer > token {
			return fmt.Errorf("a write with token %d accepted after one with %d", token, newer)
		}
		mu.Lock()
		*order = append(*order, token)
		mu.Unlock()
		return nil
	}
}
