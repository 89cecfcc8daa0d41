package once_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// lostAnswer is a store whose outcome writes land and whose answer is then lost, as a request's
// that timed out: etcd applies a request whose client gave up, a SQL COMMIT may be done when its
// answer never comes. It hides the real store's Finisher (the plain Finish, then Release):
// finisherLostAnswer has it, answered the same way.
type lostAnswer struct{ store.Store }

func lost(a store.Attempt, err error) (store.Attempt, error) {
	if err != nil {
		return a, err // a try after the write that landed: refused (not running, or not held)
	}
	return store.Attempt{}, fmt.Errorf("%w: test: answer lost: %w", store.ErrUnavailable, context.DeadlineExceeded)
}

func (s lostAnswer) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	return lost(s.Store.Finish(ctx, runID, token, o))
}

// unanswered is a store that cannot be reached once the work is over: its outcome writes time
// out without landing, and its reads fail after them; its lease is not renewed (so that finish's
// retries end with it).
// With gone, its writes fail as a store's that records nothing more (store.ErrNotRecorded: a
// SQLite ledger deleted while in use), which cannot have landed.
type unanswered struct {
	store.Store
	down *atomic.Bool
	gone bool
}

func (s unanswered) Finish(context.Context, string, int64, store.Outcome) (store.Attempt, error) {
	s.down.Store(true)
	if s.gone {
		return store.Attempt{}, fmt.Errorf("%w: %w: test: the ledger is gone", store.ErrUnavailable, store.ErrNotRecorded)
	}
	return store.Attempt{}, fmt.Errorf("%w: test: %w", store.ErrUnavailable, context.DeadlineExceeded)
}

func (s unanswered) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	if s.down.Load() {
		return store.SlotState{}, fmt.Errorf("%w: test: reads refused", store.ErrUnavailable)
	}
	return s.Store.Slot(ctx, task, slot)
}

func (s unanswered) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("%w: test: reads refused", store.ErrUnavailable)
	}
	return s.Store.History(ctx, q)
}

func (unanswered) Renew(context.Context, store.Lease, time.Duration) (store.Lease, error) {
	return store.Lease{}, fmt.Errorf("%w: test: renewals refused", store.ErrUnavailable)
}

// finisherLostAnswer is lostAnswer with the real store's Finisher, answered the same way.
type finisherLostAnswer struct{ lostAnswer }

func (s finisherLostAnswer) FinishRelease(ctx context.Context, runID string, l store.Lease, o store.Outcome) (store.Attempt, error) {
	return lost(s.Store.(store.Finisher).FinishRelease(ctx, runID, l, o))
}

// An outcome whose write landed though its answer was lost (a timeout) is read back and reported
// as recorded, in the Result and the log: the run said "outcome NOT recorded" while history said
// succeeded.
func TestOutcomeRecordedAfterAllIsSaid(t *testing.T) {
	for _, c := range []struct {
		name  string
		wrap  func(store.Store) store.Store
		work  error
		state store.State
	}{
		{"finish succeeded", func(s store.Store) store.Store { return lostAnswer{Store: s} }, nil, store.Succeeded},
		{"finish failed", func(s store.Store) store.Store { return lostAnswer{Store: s} }, exitErr(3), store.Failed},
		{"finish-release succeeded", func(s store.Store) store.Store { return finisherLostAnswer{lostAnswer{Store: s}} }, nil, store.Succeeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, _ := newStore(t)
			s := c.wrap(raw)
			if _, ok := s.(store.Finisher); ok != strings.HasPrefix(c.name, "finish-release") {
				t.Fatal("the wrapper does not give the capability the case is about")
			}
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			res := do(t, once.Options{Store: s, Task: "t", Slot: "s", TTL: 10 * time.Second, LockDir: t.TempDir(), Logger: log},
				func(context.Context, *once.Run) error { return c.work })
			if res.Decision != once.Ran || res.RecordErr != nil || res.Attempt == nil || res.Attempt.State != c.state ||
				res.Attempt.ExitCode == nil || !errors.Is(res.WorkErr, c.work) {
				t.Fatalf("result %+v (attempt %+v): want ran, recorded %s", res, res.Attempt, c.state)
			}
			st, err := raw.Slot(context.Background(), "t", "s")
			if err != nil || st.Last == nil || st.Last.State != c.state {
				t.Fatalf("history: %+v %v, want %s", st.Last, err, c.state)
			}
			out := logs.String()
			if strings.Contains(out, "NOT recorded") || !strings.Contains(out, "recorded after all") ||
				!strings.Contains(out, "state="+string(c.state)) || !strings.Contains(out, "answer lost") {
				t.Fatalf("log: %q, want the outcome said recorded after all, with the error it met", out)
			}
			if ls, err := raw.Leases(context.Background()); err != nil || len(ls) != 0 {
				t.Fatalf("leases %+v %v: want the lease released", ls, err)
			}
		})
	}
}

// An outcome whose write failed in a way that may have landed, with the attempt that cannot be
// read back either, is said to be maybe recorded, with the command that tells: not "NOT recorded".
func TestOutcomeMaybeRecordedIsSaid(t *testing.T) {
	raw, _ := newStore(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t0 := time.Now()
	res := do(t, once.Options{Store: unanswered{Store: raw, down: new(atomic.Bool)}, Task: "t", Slot: "s", TTL: time.Second, LockDir: t.TempDir(), Logger: log}, ok)
	if res.Decision != once.Ran || !errors.Is(res.RecordErr, once.ErrMaybeRecorded) || !errors.Is(res.RecordErr, store.ErrUnavailable) ||
		res.Attempt == nil || res.Attempt.State != store.Running {
		t.Fatalf("result %+v: want ran, its outcome maybe recorded", res)
	}
	if took := time.Since(t0); took > 8*time.Second {
		t.Fatalf("took %s: the read back is not bounded", took)
	}
	out := logs.String()
	if strings.Contains(out, "NOT recorded") || !strings.Contains(out, "may or may not have been recorded") ||
		!strings.Contains(out, "once history --task t") || !strings.Contains(out, "reads refused") {
		t.Fatalf("log: %q", out)
	}
}

// A write the store says is not recorded (store.ErrNotRecorded) cannot have landed: the outcome
// is said NOT recorded, not maybe, though the attempt cannot be read back.
func TestOutcomeNotRecordedIsCertain(t *testing.T) {
	raw, _ := newStore(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res := do(t, once.Options{Store: unanswered{Store: raw, down: new(atomic.Bool), gone: true}, Task: "t", Slot: "s", TTL: time.Second,
		LockDir: t.TempDir(), Logger: log}, ok)
	if res.Decision != once.Ran || res.RecordErr == nil || errors.Is(res.RecordErr, once.ErrMaybeRecorded) || !errors.Is(res.RecordErr, store.ErrNotRecorded) {
		t.Fatalf("result %+v: want ran, its outcome not recorded", res)
	}
	if out := logs.String(); !strings.Contains(out, "NOT recorded") || strings.Contains(out, "may or may not") {
		t.Fatalf("log: %q", out)
	}
}
