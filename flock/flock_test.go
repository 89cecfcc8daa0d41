package flock_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/flock"
)

// TestMain doubles as a lock-holder process: FLOCK_TEST_HOLD=dir:task makes the test binary take the lock,
// optionally start a child ("sleep 300") that would inherit a non-CLOEXEC descriptor, print "locked <childpid>",
// and hold the lock until stdin closes or it is killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FLOCK_TEST_HOLD"); spec != "" {
		os.Exit(hold(spec))
	}
	os.Exit(m.Run())
}

func hold(spec string) int {
	dir, task, _ := strings.Cut(spec, "|")
	wait, _ := time.ParseDuration(os.Getenv("FLOCK_TEST_WAIT"))
	l, err := flock.Acquire(context.Background(), dir, task, wait)
	if err != nil {
		fmt.Println("error", err)
		if errors.Is(err, flock.ErrBusy) {
			return 75
		}
		return 1
	}
	child := 0
	if os.Getenv("FLOCK_TEST_CHILD") != "" {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		child = c.Process.Pid
	}
	fmt.Println("locked", child)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = l.Release()
	return 0
}

type holder struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	out   *bufio.Reader
}

func startHolder(t *testing.T, dir, task string, wait time.Duration, child bool) (*holder, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FLOCK_TEST_HOLD="+dir+"|"+task, "FLOCK_TEST_WAIT="+wait.String())
	if child {
		cmd.Env = append(cmd.Env, "FLOCK_TEST_CHILD=1")
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: in, out: bufio.NewReader(outp)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := h.out.ReadString('\n')
	return h, strings.TrimSpace(line)
}

func TestContention(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "locks")
	h1, line := startHolder(t, dir, "job/x", 0, false)
	if !strings.HasPrefix(line, "locked") {
		t.Fatalf("first holder: %q", line)
	}
	_, line = startHolder(t, dir, "job/x", 0, false)
	if !strings.Contains(line, flock.ErrBusy.Error()) {
		t.Fatalf("second holder should be busy, got %q", line)
	}
	// In-process contention too: flock locks belong to open file descriptions, so this is a real conflict.
	start := time.Now()
	if _, err := flock.Acquire(context.Background(), dir, "job/x", 0); !errors.Is(err, flock.ErrBusy) {
		t.Fatalf("in-process: want ErrBusy, got %v", err)
	}
	if d := time.Since(start); d > time.Second { // fail fast, not wait: a loaded machine can be slow
		t.Errorf("fail-fast took %v", d)
	}
	// A different task is independent.
	l, err := flock.Acquire(context.Background(), dir, "job/y", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()

	// Created dirs are 0700, parents included.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v err %v", d, st.Mode(), err)
		}
	}
	st, err := os.Stat(l.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v err %v", st.Mode(), err)
	}

	// wait > 0: succeeds once the holder lets go.
	go func() { time.Sleep(300 * time.Millisecond); h1.stdin.Close() }()
	start = time.Now()
	l2, err := flock.Acquire(context.Background(), dir, "job/x", 5*time.Second)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	t.Logf("acquired after %v", time.Since(start))
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(); err != nil {
		t.Fatal("second Release:", err)
	}
}

func TestWaitTimesOutAndCtx(t *testing.T) {
	dir := t.TempDir()
	l, err := flock.Acquire(context.Background(), dir, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	start := time.Now()
	_, err = flock.Acquire(context.Background(), dir, "t", 200*time.Millisecond)
	if !errors.Is(err, flock.ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > time.Second {
		t.Errorf("wait took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = flock.Acquire(ctx, dir, "t", time.Hour)
	if !errors.Is(err, flock.ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrBusy+DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("ctx cancel took %v", d)
	}
}

func TestReleasedOnSIGKILL(t *testing.T) {
	dir := t.TempDir()
	h, line := startHolder(t, dir, "k", 0, false)
	if !strings.HasPrefix(line, "locked") {
		t.Fatal(line)
	}
	if _, err := flock.Acquire(context.Background(), dir, "k", 0); !errors.Is(err, flock.ErrBusy) {
		t.Fatalf("want busy, got %v", err)
	}
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
	l, err := flock.Acquire(context.Background(), dir, "k", 0)
	if err != nil {
		t.Fatalf("after SIGKILL: %v", err)
	}
	l.Release()
}

// The holder starts a child that outlives it; the child must not keep the lock (O_CLOEXEC). flock(1)'s
// classic failure is exactly this: a daemonized grandchild holding the lock forever.
func TestChildDoesNotInheritLock(t *testing.T) {
	dir := t.TempDir()
	h, line := startHolder(t, dir, "c", 0, true)
	var child int
	if _, err := fmt.Sscanf(line, "locked %d", &child); err != nil || child == 0 {
		t.Fatalf("holder: %q", line)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
	if err := syscall.Kill(child, 0); err != nil {
		t.Fatalf("child should still be alive: %v", err)
	}
	l, err := flock.Acquire(context.Background(), dir, "c", 0)
	if err != nil {
		t.Fatalf("lock kept by the holder's child: %v", err)
	}
	l.Release()
}

func TestUnsafe(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := flock.Acquire(context.Background(), link, "t", 0); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("symlinked dir: want ErrUnsafe, got %v", err)
	}
	if err := flock.Check(link); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("Check symlinked dir: %v", err)
	}

	// Symlinked lock file: must be refused and the target left untouched.
	target := filepath.Join(base, "victim")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(real, flock.FileName("s"))); err != nil {
		t.Fatal(err)
	}
	if _, err := flock.Acquire(context.Background(), real, "s", 0); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("symlinked lock file: want ErrUnsafe, got %v", err)
	}
	if err := flock.Check(real); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("Check with symlinked lock file: %v", err)
	}
	// Another task's lock file is not Acquire's business (doctor's Check reports it): Acquire does not
	// list the directory, so its cost does not grow with the number of tasks on the host.
	if l, err := flock.Acquire(context.Background(), real, "other", 0); err != nil {
		t.Errorf("another task's symlinked lock file refused this one: %v", err)
	} else {
		l.Release()
	}

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := flock.Acquire(context.Background(), open, "t", 0)
	if !errors.Is(err, flock.ErrUnsafe) || !strings.Contains(err.Error(), "chmod 700 "+open) {
		t.Errorf("0777 dir: want ErrUnsafe with fix, got %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	if err := flock.Check(open); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("Check 0777: %v", err)
	}

	// A 0755 dir is fine (not writable by others); a missing one is fine for Check.
	ro := filepath.Join(base, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := flock.Check(ro); err != nil {
		t.Errorf("Check 0755: %v", err)
	}
	if err := flock.Check(filepath.Join(base, "missing")); err != nil {
		t.Errorf("Check missing: %v", err)
	}
	// A file where the dir should be.
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := flock.Acquire(context.Background(), file, "t", 0); !errors.Is(err, flock.ErrUnsafe) {
		t.Errorf("file as dir: %v", err)
	}
}

func checkName(t *testing.T, task, name string) {
	t.Helper()
	if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) >= 255 || strings.HasPrefix(name, ".") {
		t.Fatalf("unsafe name %q for %q", name, task)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			t.Fatalf("byte %q in name %q for %q", c, name, task)
		}
	}
	if !strings.HasSuffix(name, ".lock") || len(name) > 64+1+32+5 {
		t.Fatalf("bad shape %q", name)
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"", ".", "..", "a", "backup/db@host:5432", "../../etc/passwd", ".hidden", "/", "a\x00b",
		strings.Repeat("x", 200), strings.Repeat("/", 300), "ünïcode", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, task string) {
		name := flock.FileName(task)
		checkName(t, task, name)
		if flock.FileName(task) != name {
			t.Fatal("not deterministic")
		}
	})
}

func TestFileNameDistinct(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@/-"
	seen := make(map[string]string, 200000)
	add := func(task string) {
		name := flock.FileName(task)
		checkName(t, task, name)
		if prev, ok := seen[name]; ok && prev != task {
			t.Fatalf("collision: %q and %q → %q", prev, task, name)
		}
		seen[name] = task
	}
	// Tasks differing only in bytes that sanitize alike must still differ.
	for _, s := range []string{"a/b", "a:b", "a@b", "a_b", "a.b", ".a", "_a"} {
		add(s)
	}
	buf := make([]byte, 1)
	for i := 0; i < 200000; i++ {
		rand.Read(buf)
		n := 8 + int(buf[0])%40
		if i%100 == 0 {
			n = 180 + int(buf[0])%21 // long names share a truncated prefix
		}
		b := make([]byte, n)
		rand.Read(b)
		for j := range b {
			b[j] = alphabet[int(b[j])%len(alphabet)]
		}
		if n > 64 {
			copy(b, strings.Repeat("p", 64))
		}
		add(string(b))
	}
	if len(seen) < 190000 {
		t.Fatalf("generator produced too few distinct tasks: %d", len(seen))
	}
}

// The directories above the lock directory (ONCE_HOME and its parents) must not let anyone else rename the
// lock directory away: a second process would then lock a new file while the first holds the old one.
func TestUnsafeParents(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	locks := filepath.Join(home, "locks")
	_, err := flock.Acquire(context.Background(), locks, "t", 0)
	if !errors.Is(err, flock.ErrUnsafe) || !strings.Contains(err.Error(), "chmod o-w "+home) {
		t.Fatalf("0777 home: want ErrUnsafe with the fix, got %v", err)
	}
	if _, err := os.Lstat(locks); err == nil {
		t.Fatal("the lock directory was created in an unsafe home")
	}
	if err := flock.Check(locks); !errors.Is(err, flock.ErrUnsafe) {
		t.Fatalf("Check under a 0777 home: %v", err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := flock.Acquire(context.Background(), locks, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the home to another user")
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := flock.Acquire(context.Background(), locks, "t", 0); !errors.Is(err, flock.ErrUnsafe) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("home of another user: %v", err)
	}
}

// Issue 12: a waiter gets the lock within a few milliseconds of its release — the holder closing
// it, or the kernel closing it when the holder is killed — not after a backoff of up to 100 ms.
// A round is measured again (up to three) when it misses: on a loaded machine the scheduler's
// delays are in the figures too; a waiter that polls every 100 ms misses every round by far.
func TestWaitWakesWhenReleased(t *testing.T) {
	var rounds []string
	for round := range 3 {
		released, killed := wakeRound(t, fmt.Sprint(round))
		rounds = append(rounds, fmt.Sprintf("released: p50 %s; killed: %s", released, killed))
		// Speed is measured by bench/wait-wakeup.sh; this only tells a wake-up (about 1 ms) from
		// polling every 100 ms (a median of 50 ms), with room for a loaded CI machine.
		if released <= 25*time.Millisecond && killed <= 60*time.Millisecond {
			t.Logf("got the lock after: %s", strings.Join(rounds, "; "))
			return
		}
	}
	t.Errorf("got the lock after (want a median ≤ 25ms after a release, ≤ 60ms after a kill): %s", strings.Join(rounds, "; "))
}

// wakeRound returns the median of 30 waiters' delays after their holders released, and one waiter's
// after its holder (another process) was killed.
func wakeRound(t *testing.T, round string) (time.Duration, time.Duration) {
	dir := t.TempDir()
	ctx := context.Background()
	const n = 30
	late := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		task := fmt.Sprint("w", i)
		l, err := flock.Acquire(ctx, dir, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan time.Time, 1)
		go func() {
			time.Sleep(300*time.Millisecond + time.Duration(i)*10*time.Millisecond)
			at := time.Now()
			l.Release()
			released <- at
		}()
		wg.Go(func() {
			w, err := flock.Acquire(ctx, dir, task, 5*time.Second)
			got := time.Now()
			if err != nil {
				t.Errorf("%s: %v", task, err)
				return
			}
			late[i] = got.Sub(<-released)
			w.Release()
		})
	}
	wg.Wait()
	slices.Sort(late)

	h, line := startHolder(t, dir, "killed"+round, 0, false)
	if !strings.HasPrefix(line, "locked") {
		t.Fatal(line)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := flock.Acquire(ctx, dir, "killed"+round, 5*time.Second)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l.Release()
	}()
	time.Sleep(400 * time.Millisecond) // the waiter is well into its backoff
	killed := time.Now()
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	return late[n/2], (<-got).Sub(killed)
}
