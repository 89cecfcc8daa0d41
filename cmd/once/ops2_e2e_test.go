package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "ok", "--per", "day", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	r := e.run("doctor")
	if r.code != 0 || !strings.Contains(r.stdout, "OK    clock") || !strings.Contains(r.stdout, "healthy") {
		t.Fatalf("doctor: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestDoctorFindsProblems(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "--task", "twice", "--slot", "x", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	e.run("run", "--task", "twice", "--slot", "x", "--", "true") // a double trigger: skipped at once
	ctx := context.Background()
	s, err := store.Open(ctx, "sqlite://"+filepath.Join(e.home, "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// An overlap, forged: A's lease expires while its attempt still runs, B takes over and runs
	// without marking A's attempt unknown.
	la, err := s.Acquire(ctx, store.AcquireRequest{Task: "ov", Holder: "hostA:1", RunID: "run-a", TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "ov", Slot: "s1", RunID: "run-a", Number: 1, Holder: "hostA:1", Token: la.Token, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	lb, err := s.Acquire(ctx, store.AcquireRequest{Task: "ov", Holder: "hostB:2", RunID: "run-b", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "ov", Slot: "s2", RunID: "run-b", Number: 1, Holder: "hostB:2", Token: lb.Token, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	code := 0
	if _, err := s.Finish(ctx, "run-b", lb.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}
	// A stale lease: held by a process of this host that is gone, named as this once names it
	// (USER@HOST:PID) and as an older once did (HOST:PID), which may share the store.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for task, holder := range map[string]string{"sl": host + ":", "sl2": "alice(root)@" + host + ":"} {
		if _, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: holder + strconv.Itoa(dead.Process.Pid), RunID: "run-" + task, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// A world-writable lock directory.
	locks := filepath.Join(e.home, "locks")
	if err := os.MkdirAll(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locks, 0o777); err != nil {
		t.Fatal(err)
	}
	r := e.run("doctor")
	t.Log(r.stdout)
	for _, want := range []string{"OVERLAP: attempt 1 of slot \"s1\" (run run-a, holder hostA:1", "run run-b, holder hostB:2",
		"stale lease: held by " + host + ":", "stale lease: held by alice(root)@" + host + ":", "group/world-writable", "task twice: launched 2 times", "OK    clock"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	if r.code != 1 || t.Failed() {
		t.Fatalf("doctor: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = e.run("doctor", "--json")
	var rep struct {
		Healthy  bool
		Findings []store.Finding
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Healthy || r.code != 1 {
		t.Fatalf("doctor --json: %d %v\n%s", r.code, err, r.stdout)
	}
	fails := map[string]bool{}
	for _, f := range rep.Findings {
		if f.Level == store.LevelFail {
			fails[f.Check] = true
		}
	}
	if !fails["overlap"] || !fails["lease"] || !fails["locks"] {
		t.Fatalf("json fails: %v\n%s", fails, r.stdout)
	}
}

type hook struct {
	mu    sync.Mutex
	reqs  []string // "METHOD PATH?QUERY BODY"
	fails int      // answer 503 to this many requests first
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(b))
	if h.fails > 0 && r.Method == http.MethodPost {
		h.fails--
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (h *hook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = nil
}

func (h *hook) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.reqs, "\n")
}

func TestNotifyAndPing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := &hook{fails: 1}
	srv := httptest.NewServer(h)
	defer srv.Close()
	r := e.run("run", "--task", "nt", "--slot", "s1", "--notify", srv.URL+"/hook", "--ping", srv.URL+"/ping", "--", "sh", "-c", "exit 3")
	if r.code != 3 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	got := h.all()
	if strings.Count(got, "POST /hook") != 2 || !strings.Contains(got, `"event":"failed"`) || !strings.Contains(got, `"exit_code":3`) {
		t.Fatalf("want the failed event retried once after a 503; got\n%s", got)
	}
	if !strings.Contains(got, "GET /ping/start?rid=") || !strings.Contains(got, "GET /ping/3?rid=") {
		t.Fatalf("pings: %s", got)
	}
	h2 := &hook{}
	srv2 := httptest.NewServer(h2)
	defer srv2.Close()
	e.vars = append(e.vars, "ONCE_NOTIFY="+srv2.URL+"/env")
	if r := e.run("run", "--task", "nt", "--slot", "s1", "--max-attempts", "1", "--", "true"); r.code != 76 {
		t.Fatalf("review: %d %s", r.code, r.stderr)
	}
	if got := h2.all(); !strings.Contains(got, `"event":"review"`) || !strings.Contains(got, "once resolve --task nt --slot s1") {
		t.Fatalf("review event via ONCE_NOTIFY: %s", got)
	}
}

func TestNotifyDeadEndpointDoesNotHang(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	url := "http://u:hunter2@" + ln.Addr().String()
	began := time.Now()
	r := e.run("run", "--task", "dead", "--notify", url+"/hook", "--ping", url+"/ping", "--notify-timeout", "1s", "--", "false")
	exited := began.Add(r.dur)
	t.Logf("exit %d after %s: %s", r.code, r.dur, r.stderr)
	// Measured from the job's end (its log line), not from once's start: a race-built once can
	// take seconds to start on a loaded machine (CI: 4.5 s in all, the job's end to the exit 1 s).
	ended, ok := jobEnd(r.stderr)
	if r.code != 1 || !ok || exited.Sub(ended) > 3*time.Second {
		t.Fatalf("exit %d %s after the job's end (%v), want 1 within ~1s of it\n%s", r.code, exited.Sub(ended), ok, r.stderr)
	}
	if strings.Contains(r.stderr, "hunter2") {
		t.Fatalf("password in log: %s", r.stderr)
	}
}

// jobEnd is the time of once's "end" log line in stderr.
func jobEnd(stderr string) (time.Time, bool) {
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, " msg=end ") || !strings.HasPrefix(line, "time=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		return at, err == nil
	}
	return time.Time{}, false
}

// A command that cannot start (127, 126) records nothing; --notify and --ping still say so, since
// with cron's mail off they are all that would.
func TestNotifyCommandNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	r := e.run("run", "--task", "nf", "--per", "day", "--tz", "UTC", "--notify", srv.URL+"/hook", "--ping", srv.URL+"/ping", "--", "/nonexistent/cmd")
	if r.code != 127 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	got := h.all()
	day := `"slot":"` + time.Now().UTC().Format("2006-01-02") + `"`
	if !strings.Contains(got, `"event":"failed"`) || !strings.Contains(got, `"exit_code":127`) || !strings.Contains(got, "GET /ping/127") ||
		!strings.Contains(got, day) {
		t.Fatalf("want a failed event of %s and a /127 ping; got\n%s", day, got)
	}
}

// A store that cannot be reached (69) runs nothing and records nothing: --notify and --ping say so
// too, naming the slot (cron's mail was all that did).
func TestNotifyStoreUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // a port nothing listens on
	for dsn, code := range map[string]int{
		fmt.Sprintf("postgres://u:pw@127.0.0.1:%d/db", port):         69,
		fmt.Sprintf("postgres://u:pw@127.0.0.1:%d/db?bogus=1", port): 64, // every launch of the line refuses it
	} {
		h.reset()
		r := e.run("run", "--store", dsn, "--task", "down", "--per", "day", "--tz", "UTC",
			"--notify", srv.URL+"/hook", "--ping", srv.URL+"/ping", "--", "true")
		if r.code != code {
			t.Fatalf("run: %d %s, want %d", r.code, r.stderr, code)
		}
		got := h.all()
		day := `"slot":"` + time.Now().UTC().Format("2006-01-02") + `"`
		if !strings.Contains(got, `"event":"failed"`) || !strings.Contains(got, fmt.Sprintf(`"exit_code":%d`, code)) ||
			!strings.Contains(got, fmt.Sprintf("GET /ping/%d", code)) || !strings.Contains(got, day) || strings.Contains(got, "pw") {
			t.Fatalf("%d: want a failed event of %s, without the password, and a /%d ping; got\n%s", code, day, code, got)
		}
	}
}

// A flag value that every launch of the line refuses (64) runs nothing: --notify and --ping say
// so as for a store that cannot be reached, once they are known good themselves. A value the flag
// parser cannot read (a number that is not one) is refused before them: stderr only.
func TestNotifyUsageError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	hooks := []string{"--notify", srv.URL + "/hook", "--ping", srv.URL + "/ping"}
	for name, c := range map[string]struct {
		flags []string
		sent  bool
	}{
		"a bad period":          {[]string{"--per", "dya"}, true},
		"a bad zone":            {[]string{"--per", "day", "--tz", "Mars/Base"}, true},
		"a negative budget":     {[]string{"--per", "day", "--max-attempts", "-1"}, true},
		"catch-up without slot": {[]string{"--catch-up", "2d"}, true},
		"a bad task":            {[]string{"--task", "a\x01b"}, true},
		"not a number":          {[]string{"--max-attempts", "abc"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			h.reset()
			args := append([]string{"run", "--task", "bad-line"}, hooks...)
			args = append(append(args, c.flags...), "--", "true")
			r := e.run(args...)
			if r.code != 64 {
				t.Fatalf("run: %d %s, want 64", r.code, r.stderr)
			}
			got := h.all()
			sent := strings.Contains(got, `"event":"failed"`) && strings.Contains(got, `"exit_code":64`) && strings.Contains(got, "GET /ping/64")
			if sent != c.sent {
				t.Fatalf("sent %v, want %v (stderr %s); got\n%s", sent, c.sent, r.stderr, got)
			}
		})
	}
	h.reset()
	if r := e.run("run", "--task", "bad-hook", "--notify", "ftp://x", "--ping", srv.URL+"/ping", "--", "true"); r.code != 64 || h.all() != "" {
		t.Fatalf("a bad --notify: %d %s, hooks got %q", r.code, r.stderr, h.all())
	}
}
