package once_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// silentAfterWrite is a store whose first outcome write lands and whose answer then never comes
// (a connection that went silent after the COMMIT reached the server): the call returns when its
// context ends, as a client's on a silent connection does. Later writes are the real store's. It
// hides the real store's Finisher, as lostAnswer does.
type silentAfterWrite struct {
	store.Store
	tries *atomic.Int32
}

func (s silentAfterWrite) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	if s.tries.Add(1) > 1 {
		return s.Store.Finish(ctx, runID, token, o)
	}
	if _, err := s.Store.Finish(context.Background(), runID, token, o); err != nil {
		return store.Attempt{}, err
	}
	<-ctx.Done()
	return store.Attempt{}, fmt.Errorf("%w: test: no answer: %w", store.ErrUnavailable, ctx.Err())
}

// A try of the outcome that gets no answer gives way after a third of the TTL, not at the
// lease's expiry; the write it made had landed, so the next try is refused (the attempt is no
// longer running), and the outcome is read back as recorded after all. Before each try had that
// bound, the first try waited for the expiry (6 s here).
func TestFinishTryBoundedByThirdOfTTL(t *testing.T) {
	raw, _ := newStore(t)
	tries := new(atomic.Int32)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	const ttl = 6 * time.Second
	var over time.Time
	res := do(t, once.Options{Store: silentAfterWrite{Store: raw, tries: tries}, Task: "t", Slot: "s", TTL: ttl, LockDir: t.TempDir(), Logger: log},
		func(context.Context, *once.Run) error { over = time.Now(); return nil })
	took := time.Since(over)
	if res.Decision != once.Ran || res.RecordErr != nil || res.Attempt == nil || res.Attempt.State != store.Succeeded {
		t.Fatalf("result %+v (attempt %+v): want ran, recorded succeeded:\n%s", res, res.Attempt, logs.String())
	}
	if !strings.Contains(logs.String(), "recorded after all") {
		t.Fatalf("log: %q, want the outcome said recorded after all", logs.String())
	}
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d tries, want 2: the silent one, then the refused one", n)
	}
	if took < ttl/3-100*time.Millisecond || took > ttl*2/3 {
		t.Fatalf("recorded %s after the work, want about a third of the TTL (%s)", took, ttl/3)
	}
}

// slowFinish is a store that answers an outcome write after a delay: slow, not silent.
type slowFinish struct {
	store.Store
	delay time.Duration
}

func (s slowFinish) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return store.Attempt{}, fmt.Errorf("%w: test: %w", store.ErrUnavailable, ctx.Err())
	}
	return s.Store.Finish(ctx, runID, token, o)
}

// A store that answers in a few seconds records the outcome on the first try under the default
// TTL (60 s: a try may take 20 s); the per-try bound does not make it fail.
func TestFinishSlowStoreRecordsFirstTry(t *testing.T) {
	raw, _ := newStore(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res := do(t, once.Options{Store: slowFinish{Store: raw, delay: 3 * time.Second}, Task: "t", Slot: "s", LockDir: t.TempDir(), Logger: log}, ok)
	if res.Decision != once.Ran || res.RecordErr != nil || res.Attempt == nil || res.Attempt.State != store.Succeeded {
		t.Fatalf("result %+v: want ran, recorded succeeded:\n%s", res, logs.String())
	}
	if out := logs.String(); strings.Contains(out, "could not be recorded") || strings.Contains(out, "after all") {
		t.Fatalf("log: %q: want the outcome recorded on the first try", out)
	}
}
