package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/store"
)

// A job a reload removes while it runs is kept for the drain only until its launch ends: a
// daemon whose jobs file is rewritten with other names while they run (a generated drop-in) kept
// every such job's state for its lifetime.
func TestReloadForgetsRemovedJobsOnceTheirLaunchEnds(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	started := make(chan string, 16)
	mk := func(name string, release chan struct{}) Job {
		return Job{Job: jobfile.Job{Name: name, Schedule: "@every 1s"}, Work: func(ctx context.Context, _ *once.Run) error {
			select { // never blocks: the job fires every second while the test polls
			case started <- name:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}
	}
	const cycles = 6
	releases := make([]chan struct{}, cycles)
	for i := range releases {
		releases[i] = make(chan struct{})
	}
	s, err := New(Config{Store: st, Node: "n", Poll: 100 * time.Millisecond, Drain: 5 * time.Second, Jobs: []Job{mk("gone-0", releases[0])}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for i := range cycles {
		name := fmt.Sprintf("gone-%d", i)
		awaitStarted(t, started, name)
		if i+1 == cycles {
			break
		}
		// Removed while it runs: retired for the drain; then its launch ends.
		if err := s.Reload([]Job{mk(fmt.Sprintf("gone-%d", i+1), releases[i+1])}); err != nil {
			t.Fatal(err)
		}
		close(releases[i])
	}
	close(releases[cycles-1])
	// Every removed job's launch was let end: none is kept.
	n := 0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		n = len(s.retired)
		s.mu.Unlock()
		if n == 0 {
			return
		}
	}
	t.Errorf("%d removed jobs still kept 20s after their launches were let end (%d reloads); want 0", n, cycles-1)
}

func awaitStarted(t *testing.T, started chan string, name string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case got := <-started:
			if got == name {
				return
			}
		case <-timeout:
			t.Fatalf("%s did not start within 20s", name)
		}
	}
}
