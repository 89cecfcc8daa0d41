package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/store/storetest"
)

const helperEnv = "ONCE_SQLITE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func harness() storetest.Harness {
	return storetest.Harness{DSN: func(tb testing.TB) string {
		return "sqlite://" + filepath.Join(tb.TempDir(), "once.db")
	}}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness()) }

// TestConformancePrefix runs the suite on two prefixes sharing one file. Every case's writes,
// schema creation included, queue for that one file's writer, all cases at once: on a loaded CI
// machine the queue stalled past the default 10 s busy_timeout (RecordLazy's Acquire gave up),
// so this suite waits up to a minute. What it checks is that prefixes keep apart, not how fast.
func TestConformancePrefix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shared.db")
	var n atomic.Int64
	storetest.Run(t, storetest.Harness{DSN: func(testing.TB) string {
		return fmt.Sprintf("sqlite:%s?prefix=p%d_&busy_timeout=1m", file, n.Add(1))
	}})
}

// BenchmarkSuite: the suite's benchmarks (docs/stores/sqlite.md).
func BenchmarkSuite(b *testing.B) { storetest.RunBenchmarks(b, harness()) }

// BenchmarkOpenAcquireRelease is what `once run` does to the store on every run, in-process:
// open (schema check), acquire, release, close.
func BenchmarkOpenAcquireRelease(b *testing.B) {
	dsn := harness().DSN(b)
	ctx := context.Background()
	s, err := store.Open(ctx, dsn) // create the schema outside the loop
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	for b.Loop() {
		s, err := store.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkProcessOpenAcquireRelease runs a fresh process (this test binary) per iteration that
// opens the store, acquires and releases; BenchmarkProcessFlock runs flock(1) per iteration.
// Compare their ns/op for the CLI's wall-time budget.
func BenchmarkProcessOpenAcquireRelease(b *testing.B) {
	dsn := harness().DSN(b)
	runHelper(b, "once", dsn, "", "0")
	for b.Loop() {
		runHelper(b, "once", dsn, "", "0")
	}
}

func BenchmarkProcessFlock(b *testing.B) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		b.Skip("flock(1) not installed")
	}
	lock := filepath.Join(harness().DSN(b)[len("sqlite://"):] + ".lock")
	for b.Loop() {
		if out, err := exec.Command(flock, "-n", lock, "true").CombinedOutput(); err != nil {
			b.Fatalf("flock: %v %s", err, out)
		}
	}
}

// BenchmarkProcessNoop is the process start-up cost of the test binary alone.
func BenchmarkProcessNoop(b *testing.B) {
	for b.Loop() {
		runHelper(b, "noop", "", "", "0")
	}
}

func runHelper(tb testing.TB, mode, dsn, dir, id string) string {
	tb.Helper()
	cmd := helperCmd(mode, dsn, dir, id)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("helper %s: %v: %s", mode, err, out)
	}
	return string(out)
}

func helperCmd(mode, dsn, dir, id string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "HELPER_DSN="+dsn, "HELPER_DIR="+dir, "HELPER_ID="+id)
	return cmd
}

// helper is the child process side of the multi-process tests.
func helper(mode string) int {
	dsn, dir, id := os.Getenv("HELPER_DSN"), os.Getenv("HELPER_DIR"), os.Getenv("HELPER_ID")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	barrier := func() {
		os.WriteFile(filepath.Join(dir, "ready-"+id), nil, 0o600)
		for {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	switch mode {
	case "noop":
		return 0
	case "once":
		s, err := store.Open(ctx, dsn)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer s.Close()
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute})
		if err == nil {
			err = s.Release(ctx, l)
		}
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		return 0
	case "acquire":
		s, err := store.Open(ctx, dsn)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer s.Close()
		barrier()
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "proc-" + id, RunID: "run-" + id, TTL: time.Minute})
		var be *store.BusyError
		switch {
		case err == nil:
			fmt.Printf("won %d\n", l.Token)
		case errors.As(err, &be):
			fmt.Printf("busy %s %d\n", be.Lease.Holder, be.Lease.Token)
		default:
			fmt.Println("error:", err)
			return 1
		}
		return 0
	case "schema":
		barrier()
		s, err := store.Open(ctx, dsn)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer s.Close()
		if _, err := s.Leases(ctx); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("ok")
		return 0
	case "readonly":
		if err := syscall.Setgid(65534); err != nil {
			fmt.Println("skip: setgid:", err)
			return 0
		}
		if err := syscall.Setuid(65534); err != nil {
			fmt.Println("skip: setuid:", err)
			return 0
		}
		fmt.Println(openAndAcquire(ctx, dsn))
		return 0
	}
	fmt.Println("unknown helper mode", mode)
	return 2
}

// openAndAcquire reports "unavailable: MSG" when Open or Acquire fails with ErrUnavailable.
func openAndAcquire(ctx context.Context, dsn string) string {
	s, err := store.Open(ctx, dsn)
	if err == nil {
		defer s.Close()
		_, err = s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	}
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable: " + err.Error()
	default:
		return "other: " + err.Error()
	}
}

// spawn starts n helper processes that meet at a barrier in dir, then releases them at once.
func spawn(t *testing.T, mode, dsn string, n int) []string {
	t.Helper()
	dir := t.TempDir()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range cmds {
		cmds[i] = helperCmd(mode, dsn, dir, strconv.Itoa(i))
		outs[i] = &bytes.Buffer{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ready, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		if len(ready) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d helpers ready", len(ready), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := make([]string, n)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v: %s", i, err, outs[i])
		}
		res[i] = strings.TrimSpace(outs[i].String())
	}
	return res
}

func TestProcessesRaceAcquire(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dsn := harness().DSN(t)
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 12
	res := spawn(t, "acquire", dsn, n)
	var winner, token string
	for i, r := range res {
		if tok, ok := strings.CutPrefix(r, "won "); ok {
			if winner != "" {
				t.Fatalf("two processes won: %s and proc-%d: %q", winner, i, res)
			}
			winner, token = "proc-"+strconv.Itoa(i), tok
		}
	}
	if winner == "" {
		t.Fatalf("no process won: %q", res)
	}
	for _, r := range res {
		if !strings.HasPrefix(r, "won ") && r != "busy "+winner+" "+token {
			t.Fatalf("loser said %q, want busy %s %s", r, winner, token)
		}
	}
	ls, err := s.Leases(context.Background())
	if err != nil || len(ls) != 1 || ls[0].Holder != winner {
		t.Fatalf("Leases = %+v, %v; want %s", ls, err, winner)
	}
}

func TestProcessesCreateSchema(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "new", "once.db")
	for i, r := range spawn(t, "schema", dsn, 12) {
		if r != "ok" {
			t.Errorf("process %d: %s", i, r)
		}
	}
}

func TestFileModes(t *testing.T) {
	root := t.TempDir()
	old := syscall.Umask(0) // the modes must not depend on the umask
	defer syscall.Umask(old)
	path := filepath.Join(root, "a", "b", "once.db")
	s, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "x", Holder: "h", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	s.Close() // the WAL persists after the last close
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(root, "a"), 0o700}, {filepath.Join(root, "a", "b"), 0o700}, {path, 0o600}, {path + "-wal", 0o600}, {path + "-shm", 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != c.mode {
			t.Errorf("%s: mode %o, want %o", c.path, fi.Mode().Perm(), c.mode)
		}
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.db")
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(context.Background(), "sqlite://"+link)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), link) {
		t.Fatalf("open of a symlink: %v", err)
	}
	if _, err := os.Stat(real); err == nil {
		t.Fatal("symlink target was created")
	}
}

func checkUnavailable(t *testing.T, res, path string) {
	t.Helper()
	msg, ok := strings.CutPrefix(res, "unavailable: ")
	if !ok {
		t.Fatalf("got %q, want ErrUnavailable", res)
	}
	if !strings.Contains(msg, path) || strings.Contains(msg, "\n") {
		t.Fatalf("message %q should be one line naming %s", msg, path)
	}
	t.Logf("message: %s", msg)
}

func TestCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "once.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("this is not a database\n"), 500), 0o600); err != nil {
		t.Fatal(err)
	}
	checkUnavailable(t, openAndAcquire(context.Background(), "sqlite://"+path), path)
}

func TestReadOnlyFile(t *testing.T) {
	dir, err := os.MkdirTemp("", "once-ro-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "once.db")
	dsn := "sqlite://" + path
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if os.Geteuid() != 0 {
		checkUnavailable(t, openAndAcquire(context.Background(), dsn), path)
		return
	}
	// root ignores file modes: check as nobody, in a child process.
	res := strings.TrimSpace(runHelper(t, "readonly", dsn, "", "0"))
	if strings.HasPrefix(res, "skip:") {
		t.Skip(res)
	}
	checkUnavailable(t, res, path)
}

func TestReopenWhileLocked(t *testing.T) {
	// A second open of a current schema only reads: it works while another process holds the
	// write lock. A write then fails with ErrUnavailable once busy_timeout has passed.
	dsn := harness().DSN(t)
	ctx := context.Background()
	s, err := sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite://"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	s2, err := sqlite.Open(ctx, s.Path(), sqlite.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("reopen while locked: %v", err)
	}
	defer s2.Close()
	if _, err := s2.Leases(ctx); err != nil {
		t.Fatalf("read while locked: %v", err)
	}
	began := time.Now()
	_, err = s2.Acquire(ctx, store.AcquireRequest{Task: "x", Holder: "h", TTL: time.Second})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "busy_timeout") {
		t.Fatalf("acquire while locked: %v, want ErrUnavailable (busy)", err)
	}
	if d := time.Since(began); d < 40*time.Millisecond || d > 5*time.Second {
		t.Fatalf("busy after %s, want about 50ms", d)
	}
	t.Logf("message: %v", err)
}

// AbsoluteDSN: the DSN once hands a command (ONCE_STORE) names the same ledger wherever the
// command changes directory to.
func TestAbsoluteDSN(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"sqlite:./x.db?prefix=p1": "sqlite://" + filepath.Join(wd, "x.db") + "?prefix=p1",
		"sqlite:rel/a b.db":       "sqlite://" + (&url.URL{Path: filepath.Join(wd, "rel/a b.db")}).EscapedPath(),
		"sqlite:///abs/x.db?x=1":  "sqlite:///abs/x.db?x=1", // as given, even where it is bad
		"redis://h:1/0?prefix=a":  "redis://h:1/0?prefix=a",
		"sqlite:/abs/once.db":     "sqlite:/abs/once.db",
		// A '$' in a file name (%24, as the '$' refusal says) stays encoded: a literal '$' is refused.
		"sqlite:./a%24b.db": "sqlite://" + filepath.Join(wd, "a%24b.db"),
	} {
		if got := sqlite.AbsoluteDSN(in); got != want {
			t.Errorf("AbsoluteDSN(%q) = %q, want %q", in, got, want)
		}
		p, _, err := sqlite.ParseDSN(sqlite.AbsoluteDSN(in))
		if err == nil && !filepath.IsAbs(p) {
			t.Errorf("AbsoluteDSN(%q) reads as %q", in, p)
		}
		if p0, _, err0 := sqlite.ParseDSN(in); err0 == nil && (err != nil || p != filepath.Join(wd, p0)) && !filepath.IsAbs(p0) {
			t.Errorf("AbsoluteDSN(%q) reads as %q, %v; want %s", in, p, err, filepath.Join(wd, p0))
		}
	}
}

// AbsoluteDSN and FileDSN write a '$' of a real directory name as %24: ParseDSN refuses a raw '$'
// (an unexpanded $HOME), and the command's `once report` under a working directory such as
// /srv/a$b was 64 with sqlite:./once.db.
func TestFileDSNDollar(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a$b")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	want := filepath.Join(dir, "x y%.db")
	for _, dsn := range []string{sqlite.AbsoluteDSN("sqlite:./x%20y%25.db"), sqlite.FileDSN(want)} {
		if p, _, err := sqlite.ParseDSN(dsn); err != nil || p != want {
			t.Errorf("%q reads as %q, %v; want %q", dsn, p, err, want)
		}
	}
}

func TestParseDSN(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		path string
		opts sqlite.Options
		bad  bool
	}{
		{dsn: "sqlite:///var/lib/once/once.db", path: "/var/lib/once/once.db"},
		{dsn: "sqlite://localhost/var/once.db", path: "/var/once.db"},
		{dsn: "SQLite:///x.db", path: "/x.db"},
		{dsn: "sqlite:/abs/once.db", path: "/abs/once.db"},
		{dsn: "sqlite:relative/path.db", path: "relative/path.db"},
		{dsn: "sqlite:./once.db", path: "once.db"},
		{dsn: "sqlite:../up.db", path: "../up.db"},
		{dsn: "sqlite:///a%20b/c.db", path: "/a b/c.db"},
		{dsn: "sqlite:///x.db?prefix=team_a", path: "/x.db", opts: sqlite.Options{Prefix: "team_a"}},
		{dsn: "sqlite:./x.db?busy_timeout=5s&prefix=p1", path: "x.db", opts: sqlite.Options{Prefix: "p1", BusyTimeout: 5 * time.Second}},
		{dsn: "sqlite:///x.db?busy_timeout=250ms", path: "/x.db", opts: sqlite.Options{BusyTimeout: 250 * time.Millisecond}},
		{dsn: "sqlite:///srv/once/once.db?group=ops", path: "/srv/once/once.db", opts: sqlite.Options{Group: "ops"}},
		{dsn: "sqlite:///srv/once/once.db?group=", bad: true},
		{dsn: "sqlite:///srv/once/once.db?group=a:b", bad: true},
		{dsn: "sqlite:///srv/once/once.db?group=a%0Ab", bad: true},
		{dsn: "sqlite:///srv/once/once.db?group=a&group=b", bad: true},
		{dsn: "sqlite:", bad: true},
		{dsn: "sqlite://", bad: true},
		{dsn: "sqlite:///", bad: true},
		{dsn: "sqlite:///dir/", bad: true},
		{dsn: "sqlite://host/x.db", bad: true},
		{dsn: "postgres:///x.db", bad: true},
		{dsn: "sqlite:///x.db?mode=ro", bad: true},
		{dsn: "sqlite:///x.db?prefix=", bad: true},
		{dsn: "sqlite:///x.db?prefix=Team", bad: true},
		{dsn: "sqlite:///x.db?prefix=a-b", bad: true},
		{dsn: "sqlite:///x.db?prefix=" + strings.Repeat("a", 33), bad: true},
		{dsn: "sqlite:///x.db?prefix=a&prefix=b", bad: true},
		{dsn: "sqlite:///x.db?busy_timeout=5", bad: true},
		{dsn: "sqlite:///x.db?busy_timeout=-1s", bad: true},
		{dsn: "sqlite:///x.db?busy_timeout=2h", bad: true},
		{dsn: "sqlite:///x.db#frag", bad: true},
		{dsn: "sqlite:///a%zz.db", bad: true},
		{dsn: "sqlite:///a%00.db", bad: true},
		{dsn: "sqlite:///x.db?%zz", bad: true},
		{dsn: "sqlite:///x.db?prefix=teama;x", bad: true},
		{dsn: "sqlite:///x.db?prefix=a%zz", bad: true},
		{dsn: "sqlite:///x.db?prefx=a", bad: true},
		{dsn: "sqlite:///x.db?prefix=1a", bad: true},
		{dsn: "sqlite:///x.db?prefix=a&", bad: true},
		{dsn: "sqlite:~/x.db", bad: true}, // not expanded: a directory named ~ here
		{dsn: "sqlite:~", bad: true},
	} {
		path, opts, err := sqlite.ParseDSN(c.dsn)
		if c.bad {
			if !errors.Is(err, store.ErrBadDSN) {
				t.Errorf("ParseDSN(%q) = %q, %+v, %v; want ErrBadDSN", c.dsn, path, opts, err)
			}
			continue
		}
		if err != nil || path != c.path || opts != c.opts {
			t.Errorf("ParseDSN(%q) = %q, %+v, %v; want %q, %+v", c.dsn, path, opts, err, c.path, c.opts)
		}
	}
	// Open through the registry rejects the same way.
	if _, err := store.Open(context.Background(), "sqlite:///x.db?nope=1"); !errors.Is(err, store.ErrBadDSN) {
		t.Errorf("store.Open with an unknown parameter: %v", err)
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{"sqlite:///var/lib/once/once.db", "sqlite:./once.db", "sqlite:rel.db?prefix=a_1&busy_timeout=5s",
		"sqlite://localhost/x.db", "sqlite:", "sqlite:///x.db?prefix=a&prefix=b", "sqlite:///%41.db", "sqlite:/a?b#c",
		"sqlite:///srv/once.db?group=ops", "sqlite:///x.db?group=%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		path, opts, err := sqlite.ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, store.ErrBadDSN) {
				t.Fatalf("error %v does not wrap ErrBadDSN", err)
			}
			return
		}
		if path == "" || strings.ContainsRune(path, 0) || path != filepath.Clean(path) {
			t.Fatalf("ParseDSN(%q) path %q", dsn, path)
		}
		if len(opts.Prefix) > 32 || opts.BusyTimeout < 0 || len(opts.Group) > 64 || strings.ContainsAny(opts.Group, ":/\x00\n") {
			t.Fatalf("ParseDSN(%q) opts %+v", dsn, opts)
		}
		if opts.Prefix != "" && store.CheckPrefix(opts.Prefix) != nil {
			t.Fatalf("ParseDSN(%q) prefix %q", dsn, opts.Prefix)
		}
	})
}

// Forget deletes in batches (store.ForgetBatch), with the answers of one statement.
func TestKeysForgetBatched(t *testing.T) { storetest.KeysForgetBatched(t, harness()) }
