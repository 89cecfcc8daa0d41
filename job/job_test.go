package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/supervise"
)

// TestMain doubles as the supervision shim, as a program that uses package job must.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.ShimMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func newStore(t *testing.T) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newRunner(t *testing.T, j job.Job) *job.Runner {
	t.Helper()
	r, err := job.New(j)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// The command runs as the attempt: the run's ONCE_* variables and Job.Env reach it, the
// variables once sets that this process had do not, and its exit status is the attempt's; with a
// slot, and without one (the shim then starts before the attempt is known, and gets its
// environment with the go-ahead).
func TestCommandRunsAsTheAttempt(t *testing.T) {
	for _, sl := range []string{"s1", ""} {
		t.Run("slot="+sl, func(t *testing.T) { commandRunsAsTheAttempt(t, sl) })
	}
}

func commandRunsAsTheAttempt(t *testing.T, sl string) {
	t.Setenv("ONCE_STORE", "sqlite:///leaked.db")
	t.Setenv("ONCE_TASK", "outer")
	out := filepath.Join(t.TempDir(), "env")
	script := `printf '%s|%s|%s|%s|%s' "$ONCE_TASK" "$ONCE_SLOT" "$ONCE_ATTEMPT" "$ONCE_STORE" "$EXTRA" > "$OUT"; exit 3`
	var before []int
	r := newRunner(t, job.Job{Args: []string{"sh", "-c", script}, Grace: time.Second,
		Env:    func() []string { return []string{"OUT=" + out, "EXTRA=x"} },
		Before: func(run *once.Run) { before = append(before, run.Attempt) }})
	res, err := r.Do(context.Background(), once.Options{Store: newStore(t), Task: "t", Slot: sl, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ee job.ExitError
	if res.Decision != once.Ran || res.Attempt.State != store.Failed || *res.Attempt.ExitCode != 3 || !errors.As(res.WorkErr, &ee) || ee.Code != 3 {
		t.Fatalf("result %+v, attempt %+v", res, res.Attempt)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "t|"+sl+"|1||x"; got != want {
		t.Fatalf("the command saw %q, want %q", got, want)
	}
	if !slices.Equal(before, []int{1}) {
		t.Fatalf("Before saw attempts %v", before)
	}
}

// A run without a slot that finds the task held starts no command, and the shim it started as
// the guard began is ended (Do returns with nothing left of it).
func TestBusyEndsTheEarlyShim(t *testing.T) {
	s := newStore(t)
	if _, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "t", Holder: "other", RunID: "r0", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	r := newRunner(t, job.Job{Args: []string{"sh", "-c", "touch " + ran}})
	res, err := r.Do(context.Background(), once.Options{Store: s, Task: "t", TTL: time.Second})
	if err != nil || res.Decision != once.Busy {
		t.Fatalf("%+v, %v; want busy", res, err)
	}
	if kids := children(t); len(kids) != 0 {
		t.Fatalf("processes left after a busy Do: %v", kids)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran")
	}
}

// The caller's own Prepare runs before the command's: when it refuses, no command is prepared or
// run, no attempt is recorded, the error says why, and no process is left (with and without a
// slot: without one, the shim started early is ended).
func TestCallersPrepareComesFirst(t *testing.T) {
	for _, sl := range []string{"s1", ""} {
		t.Run("slot="+sl, func(t *testing.T) {
			s := newStore(t)
			ran := filepath.Join(t.TempDir(), "ran")
			r := newRunner(t, job.Job{Args: []string{"sh", "-c", "touch " + ran}})
			no := errors.New("paused")
			_, err := r.Do(context.Background(), once.Options{Store: s, Task: "t", Slot: sl, TTL: time.Second,
				Prepare: func(context.Context, *once.Run) error { return no }})
			if !errors.Is(err, once.ErrNotStarted) || !errors.Is(err, no) {
				t.Fatalf("err %v; want ErrNotStarted wrapping the caller's", err)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the command ran")
			}
			if h, err := s.History(context.Background(), store.HistoryQuery{Task: "t"}); err != nil || len(h) != 0 {
				t.Fatalf("history %+v, %v; want nothing recorded", h, err)
			}
			if kids := children(t); len(kids) != 0 {
				t.Fatalf("processes left: %v", kids)
			}
		})
	}
}

// children lists this process's child processes that are not zombies (from /proc).
func children(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[0] != "Z" && f[1] == fmt.Sprint(os.Getpid()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// A command that cannot be found is refused by New, before any store is touched.
func TestNewRefusesWhatCannotRun(t *testing.T) {
	for _, args := range [][]string{{"no-such-command-anywhere"}, {"/nonexistent/x"}, {os.DevNull}} {
		if _, err := job.New(job.Job{Args: args}); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	if _, err := job.New(job.Job{}); !errors.Is(err, once.ErrInvalid) {
		t.Errorf("no command: %v, want once.ErrInvalid", err)
	}
}

// A failed attempt is announced to Job.Notify, and pinged start then its exit code; a slot that
// then needs review is announced with the commands Job.Resolve gives.
func TestNotifications(t *testing.T) {
	var mu sync.Mutex
	var events []notify.Event
	var pings []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if req.URL.Path == "/notify" {
			var ev notify.Event
			b, _ := io.ReadAll(req.Body)
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Errorf("event %s: %v", b, err)
			}
			events = append(events, ev)
			return
		}
		pings = append(pings, strings.TrimPrefix(req.URL.Path, "/ping"))
	}))
	defer srv.Close()
	s := newStore(t)
	o := once.Options{Store: s, Task: "t", Slot: "s1", TTL: time.Second, MaxAttempts: 1}
	j := job.Job{Args: []string{"sh", "-c", "exit 4"}, Notify: srv.URL + "/notify", Ping: srv.URL + "/ping",
		NotifyTimeout: 5 * time.Second,
		Resolve:       func(slot string) *notify.Resolve { return &notify.Resolve{Failed: "rerun " + slot} }}
	for range 2 {
		r, err := job.New(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Do(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		r.Close() // waits for the deliveries
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Event != notify.Failed || *events[0].ExitCode != 4 ||
		events[1].Event != notify.Review || events[1].Resolve == nil || events[1].Resolve.Failed != "rerun s1" {
		t.Fatalf("events %+v", events)
	}
	if !slices.Equal(pings, []string{"/start", "/4", "/fail"}) {
		t.Fatalf("pings %q", pings)
	}
}

// Environ drops the variables once sets for a command, and only those.
func TestEnviron(t *testing.T) {
	t.Setenv("ONCE_RUN_ID", "r")
	t.Setenv("ONCE_STORE_PASSWORD_FILE", "/p")
	t.Setenv("ONCE_HOME", "/keep")
	env := job.Environ()
	for _, kv := range env {
		if strings.HasPrefix(kv, "ONCE_RUN_ID=") || strings.HasPrefix(kv, "ONCE_STORE_PASSWORD_FILE=") {
			t.Errorf("kept %s", kv)
		}
	}
	if !slices.Contains(env, "ONCE_HOME=/keep") {
		t.Error("dropped ONCE_HOME")
	}
}

// lossyStore loses every lease at its first renewal.
type lossyStore struct{ store.Store }

func (lossyStore) Renew(context.Context, store.Lease, time.Duration) (store.Lease, error) {
	return store.Lease{}, store.ErrNotHeld
}

// A lost lease stops the command's run (SIGTERM, within the run's StopBy) and is announced; the
// attempt's outcome is unknown.
func TestLostLeaseStopsTheCommand(t *testing.T) {
	got := make(chan notify.Event, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ev notify.Event
		_ = json.NewDecoder(req.Body).Decode(&ev)
		got <- ev
	}))
	defer srv.Close()
	r := newRunner(t, job.Job{Args: []string{"sleep", "30"}, Grace: 10 * time.Second, Notify: srv.URL, NotifyTimeout: 5 * time.Second})
	start := time.Now()
	res, err := r.Do(context.Background(), once.Options{Store: lossyStore{newStore(t)}, Task: "t", Slot: "s1", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the command ran %s after the lease was lost", took)
	}
	if res.Decision != once.Ran || res.Attempt == nil || res.Attempt.State == store.Succeeded {
		t.Fatalf("result %+v, attempt %+v", res, res.Attempt)
	}
	select {
	case ev := <-got:
		if ev.Event != notify.LeaseLost || ev.Slot != "s1" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no lease_lost event")
	}
}

// StartExit gives a shell's codes for a command that could not start.
func TestStartExit(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("x: %w", supervise.ErrNotFound):      job.ExitNotFound,
		fmt.Errorf("x: %w", supervise.ErrNotExecutable): job.ExitNotExecutable,
	} {
		if code, ok := job.StartExit(err); !ok || code != want {
			t.Errorf("%v: %d, %v; want %d", err, code, ok, want)
		}
	}
	if _, ok := job.StartExit(errors.New("no /proc")); ok {
		t.Error("another failure has a shell's code")
	}
}

// Dir and Stdout reach the command, and Stop ends a running command like a stop signal: the
// attempt is recorded as failed with 128+15, so the slot follows the usual rules.
func TestDirOutputAndStop(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	started := make(chan struct{})
	var once1 sync.Once
	r := newRunner(t, job.Job{Args: []string{"sh", "-c", "pwd; exec sleep 30"}, Dir: dir, Stdout: w,
		Grace: time.Second, Before: func(*once.Run) { once1.Do(func() { close(started) }) }})
	s := newStore(t)
	go func() {
		<-started
		for { // until the command has printed its directory
			mu.Lock()
			n := out.Len()
			mu.Unlock()
			if n > 0 && r.Stop(15) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	res, err := r.Do(context.Background(), once.Options{Store: s, Task: "stop", Slot: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempt == nil || res.Attempt.State != store.Failed || res.Attempt.ExitCode == nil || *res.Attempt.ExitCode != 143 {
		t.Fatalf("attempt %+v, want failed with 143", res.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.TrimSpace(out.String()); got != dir {
		t.Fatalf("the command ran in %q, want %q", got, dir)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
