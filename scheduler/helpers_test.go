package scheduler_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/supervise"
)

// TestMain doubles as the supervision shim, as a program that runs commands must.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.ShimMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// fleet is n nodes' stores on one SQLite file, as n daemons sharing it would open it.
type fleet struct {
	t      *testing.T
	dsn    string
	stores []store.Store
}

func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{t: t, dsn: "sqlite://" + filepath.Join(t.TempDir(), "once.db")}
	for range n {
		s, err := store.Open(context.Background(), f.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f.stores = append(f.stores, s)
	}
	return f
}

// node runs a scheduler on store i until the test ends or stop is called; stop waits for its drain.
type node struct {
	s      *scheduler.Scheduler
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *node) stop() {
	n.cancel()
	<-n.done
}

func (f *fleet) start(i int, c scheduler.Config) *node {
	f.t.Helper()
	c.Store = f.stores[i]
	if c.Node == "" {
		c.Node = "node" + string(rune('A'+i))
	}
	if c.Poll == 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.Logger == nil && testing.Verbose() {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", c.Node)
	}
	s, err := scheduler.New(c)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{s: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		if err := s.Run(ctx); err != nil {
			f.t.Errorf("Run: %v", err)
		}
	}()
	f.t.Cleanup(n.stop)
	return n
}

func (f *fleet) history(task string) []store.Entry {
	f.t.Helper()
	h, err := f.stores[0].History(context.Background(), store.HistoryQuery{Task: task})
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

// awaitHistory polls task's history until ok holds or d passes. Under load the nodes can stall
// for seconds (a loaded fresh-clone run fired four slots in 9 s), so what a test's fixed window
// usually shows (a skip) may come later; the checks that must hold throughout are made after.
func (f *fleet) awaitHistory(task string, d time.Duration, ok func([]store.Entry) bool) {
	f.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end) && !ok(f.history(task)); {
		time.Sleep(250 * time.Millisecond)
	}
}

// witness records each run of a work job, and any two that overlapped.
type witness struct {
	mu      sync.Mutex
	running int
	overlap int
	most    int // the most runs at one moment
	runs    []once.Run
}

func (w *witness) work(d time.Duration) once.Work {
	return func(ctx context.Context, run *once.Run) error {
		w.mu.Lock()
		w.running++
		if w.running > 1 {
			w.overlap++
		}
		w.most = max(w.most, w.running)
		w.runs = append(w.runs, *run)
		w.mu.Unlock()
		defer func() { w.mu.Lock(); w.running--; w.mu.Unlock() }()
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (w *witness) snapshot() ([]once.Run, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]once.Run(nil), w.runs...), w.overlap
}

// workJob is a job of work on schedule with a 5 s lease: renewed every 1.7 s, lost after 3.3 s
// without an answer. A 1 s lease (lost after 666 ms) lapsed under loaded clean-clone runs in one
// fleet test after another; a test of a lapse holds a lease of its own with the TTL it needs.
func workJob(name, schedule string, work once.Work) scheduler.Job {
	return scheduler.Job{Job: jobfile.Job{Name: name, Schedule: schedule, TZ: "UTC", TTL: 5 * time.Second}, Work: work}
}

// succeeded waits (8 s at most) for an attempt of task that succeeded, and returns the first found.
func (f *fleet) succeeded(t *testing.T, task string) store.Attempt {
	t.Helper()
	var att store.Attempt
	eventually(t, 8*time.Second, "an attempt of "+task+" that succeeded", func() bool {
		for _, e := range f.history(task) {
			if e.State == store.Succeeded {
				att = e.Attempt
				return true
			}
		}
		return false
	})
	return att
}

// eventually fails the test unless cond holds within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(h []store.Entry, st store.State, noteHas string) int {
	n := 0
	for _, e := range h {
		if e.State == st && strings.Contains(e.Note, noteHas) {
			n++
		}
	}
	return n
}
