package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/store"
)

// down is a store whose reads of history fail: an outage as an account meets it.
type down struct{ store.Store }

func (down) History(context.Context, store.HistoryQuery) ([]store.Entry, error) {
	return nil, fmt.Errorf("%w: down", store.ErrUnavailable)
}
func (down) Slot(context.Context, string, string) (store.SlotState, error) {
	return store.SlotState{}, fmt.Errorf("%w: down", store.ErrUnavailable)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) { w.mu.Lock(); defer w.mu.Unlock(); return w.b.Write(p) }
func (w *syncBuf) String() string              { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

// While the store stays down, a job's account is retried once per backoff, not at every poll,
// and the backoff (retry_in) stops growing at maxAccountRetry plus a quarter: 1,000 jobs log one
// line each at the start's account, then none until their retry is due.
func TestAccountRetryLogIsBounded(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n = 1000
	var jobs []Job
	for i := range n {
		jobs = append(jobs, Job{Job: jobfile.Job{Name: fmt.Sprintf("j%04d", i), Schedule: "@every 1h"}, Work: func(context.Context, *once.Run) error { return nil }})
	}
	var buf syncBuf
	s, err := New(Config{Store: down{st}, Node: "n", Poll: 10 * time.Millisecond, Jobs: jobs, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	time.Sleep(3 * time.Second) // about 300 polls
	cancel()
	<-done
	lines := strings.Count(buf.String(), "retry_in=")
	if lines > n {
		t.Errorf("%d lines with retry_in for %d jobs in 3 s of polls every 10 ms; want one per job", lines, n)
	}
	js := s.snapshot()[0]
	js.mu.Lock()
	defer js.mu.Unlock()
	var most time.Duration
	for range 100 { // 100 accounts in a row failing: more than a day of outage
		most = max(most, js.accountLaterLocked(time.Now()))
	}
	if most > maxAccountRetry*5/4 {
		t.Errorf("retry_in reached %s after 100 failed accounts; want at most %s", most, maxAccountRetry*5/4)
	}
	t.Logf("%d retry_in lines for %d jobs over 3 s; largest retry_in %s", lines, n, most)
}
