package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const root = ".."

// require skips the test for want (a tool, root) when it is missing, or fails it when
// ONCE_TEST_REQUIRE is "all" or names what (as the test command, ./scripts/test, sets it).
func require(t *testing.T, what, why string) {
	t.Helper()
	if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, what) {
		t.Fatalf("%s, but ONCE_TEST_REQUIRE=%s requires it", why, r)
	}
	t.Skip(why)
}

// needTool is the path of tool, or skips (fails) the test as require does.
func needTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		require(t, pkg, tool+" not found (Debian package "+pkg+")")
	}
	return p
}

func needRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require(t, "root", "not root: "+what+" needs root")
	}
}

var (
	shared struct {
		once  sync.Once
		dir   string
		stamp stamp
		bin   string
		err   error
	}
)

// hostBinary builds once for this machine's linux platform as make release does, once per test
// binary: the stamp of the checkout and the binary's path.
func hostBinary(t *testing.T) (stamp, string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the release tests build and run linux binaries")
	}
	shared.once.Do(func() {
		shared.stamp, shared.err = readStamp(root)
		if shared.err != nil {
			return
		}
		shared.dir, shared.err = os.MkdirTemp("", "once-release-test")
		if shared.err != nil {
			return
		}
		p := platform{"linux", runtime.GOARCH}
		shared.bin = filepath.Join(shared.dir, p.binaryName())
		shared.err = buildBinary(root, shared.bin, p, shared.stamp)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.stamp, shared.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// mustRun runs cmd and returns its combined output, failing the test when it fails.
func mustRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	sa, err := fileSHA256(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := fileSHA256(b)
	if err != nil {
		t.Fatal(err)
	}
	if sa != sb {
		t.Errorf("%s and %s differ (sha256 %s, %s): the build is not reproducible", a, b, sa, sb)
	}
}

// awayFromMidnight waits out the next midnight, in UTC or in the local zone (--per day's default),
// when it is under a minute away: the tests that run --per day twice and want the second skipped
// saw it run when the date turned between the two (cmd/once's awayFromMidnight).
func awayFromMidnight(t *testing.T) {
	t.Helper()
	for _, loc := range []*time.Location{time.UTC, time.Local} {
		now := time.Now().In(loc)
		next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
		if left := next.Sub(now); left < time.Minute {
			t.Logf("waiting %s for midnight (%s) to pass: the test runs --per day twice", left.Round(time.Millisecond), loc)
			time.Sleep(left + 100*time.Millisecond)
		}
	}
}
