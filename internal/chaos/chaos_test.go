package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/store/storetest"
)

var (
	trialsFlag = flag.Int("trials", 0, "trials per store for TestChaos (0: one per fault, the bounded run)")
	ttlFlag    = flag.Duration("ttl", 2*time.Second, "--ttl of the holders")
	graceFlag  = flag.Duration("grace", 2*time.Second, "--grace of the holders")
	reportFlag = flag.String("report", "", "append the per-store figures to this file")
	faultsFlag = flag.String("faults", "", "comma-separated faults to run (default: every fault that applies)")
)

// only keeps the faults -faults names (all of them when it is empty).
func only(fs []Fault) []Fault {
	if *faultsFlag == "" {
		return fs
	}
	var out []Fault
	for _, f := range fs {
		for _, n := range strings.Split(*faultsFlag, ",") {
			if strings.TrimSpace(n) == string(f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// parallel is -parallel for this package when the command line gives none (go test's default is
// GOMAXPROCS, 2 on the test machine): every store's trials at once. A trial mostly waits (TTLs,
// grace, the holders' sleeps): measured, the 15 store subtests at once keep a third of a core
// busy, each takes as long as alone (TestChaos/* 72 s), and the package took 94 s instead of
// 344 s with the same figures (docs/testing.md).
const parallel = 16

func TestMain(m *testing.M) {
	if os.Getenv(EnvWitness) == "1" {
		os.Exit(WitnessMain())
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	code := m.Run()
	if onceDir != "" {
		os.RemoveAll(onceDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	onceBin   string
	skewedBin string
	onceDir   string
	buildErr  error
)

// onceBinary builds the real once binary once per test process (without -race: the harness
// measures timings and the binary's own tests run with the race detector elsewhere).
func onceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		onceDir, buildErr = os.MkdirTemp("", "once-chaos-bin")
		if buildErr != nil {
			return
		}
		onceBin = filepath.Join(onceDir, "once")
		out, err := exec.Command("go", "build", "-o", onceBin, "github.com/once-run/once/cmd/once").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		skewedBin = filepath.Join(onceDir, "once-skewed")
		buildErr = BuildSkewed(context.Background(), "github.com/once-run/once/cmd/once", skewedBin, onceDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if b := os.Getenv("CHAOS_ONCE_BIN"); b != "" {
		return b // another build of once under test (e.g. an older one, to see a fault find its bug)
	}
	return onceBin
}

var prefixSeq atomic.Int64

// backends lists the stores: SQLite always; the others when ONCE_TEST_* gives their server, and a
// failure when ONCE_TEST_REQUIRE names them (or is "all") but they are missing.
func backends(t *testing.T, networkedOnly bool) []Backend {
	t.Helper()
	var bs []Backend
	if !networkedOnly {
		bs = append(bs, Backend{Name: "sqlite"})
	}
	for _, sv := range storetest.Servers(t) {
		bs = append(bs, Backend{Name: sv.Name, DSN: sv.DSN, Ctl: sv.Ctl})
	}
	return bs
}

// isolate gives the store a fresh prefix (SQLite: a fresh file) so runs never see each other.
func isolate(t *testing.T, b Backend) Backend {
	n := prefixSeq.Add(1)
	if b.Name == "sqlite" {
		b.DSN = "sqlite://" + filepath.Join(t.TempDir(), "chaos.db")
		return b
	}
	sep := "?"
	if strings.Contains(b.DSN, "?") {
		sep = "&"
	}
	b.DSN = fmt.Sprintf("%s%sprefix=chaos%d_%d", b.DSN, sep, os.Getpid(), n)
	return b
}

func newRunner(t *testing.T, b Backend) *Runner {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := onceBinary(t) // also builds skewedBin
	r, err := NewRunner(context.Background(), Config{Once: bin, Skewed: skewedBin, Witness: []string{exe}, Store: isolate(t, b),
		TTL: *ttlFlag, Grace: *graceFlag, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// runTrials runs the faults in turn (n trials in all, at least one of each) and fails the test on
// any broken promise. It returns the store's summary.
func runTrials(t *testing.T, r *Runner, faults []Fault, n int) *Summary {
	t.Helper()
	if n < len(faults) {
		n = len(faults)
	}
	s := &Summary{Store: r.cfg.Store.Name}
	ctx := context.Background()
	aborted, stalled := 0, 0
	for i := 0; i < n; i++ {
		f := faults[i%len(faults)]
		o, err := r.Trial(ctx, f)
		if err != nil {
			t.Errorf("%s trial %d (%s): %v", r.cfg.Store.Name, i, f, err)
			continue
		}
		s.Add(o)
		if o.Aborted != "" && aborted < 3 {
			aborted++ // the fault was not injected: try it again, a few times at most
			i--
			continue
		}
		aborted = 0
		if o.OnlyStoreStalled() && stalled < 2 {
			// The store stalled (CI load), which is not a broken promise; a once bug that loses leases
			// fails every retry, so two retries per store keep it visible.
			stalled++
			t.Logf("%s trial %d (%s): %s; running it again", r.cfg.Store.Name, i, f, strings.Join(o.Problems, "; "))
			i--
			continue
		}
		for _, p := range o.Problems {
			if bug := knownBugs[r.cfg.Store.Name]; bug != "" && (strings.HasPrefix(p, "liveness") || strings.HasPrefix(p, "lost slot:")) {
				t.Logf("KNOWN BUG (%s): %s trial %d (%s): %s", bug, r.cfg.Store.Name, i, f, p)
				continue
			}
			t.Errorf("%s trial %d (%s): %s", r.cfg.Store.Name, i, f, p)
		}
	}
	report(t, s)
	return s
}

// knownBugs names, per store, a liveness bug found by this harness that the store's owner must fix:
// for these stores liveness problems (an unfaulted holder failing, a slot not completed) are logged,
// not failed; safety problems still fail. Remove the entry with the fix.
var knownBugs = map[string]string{}

// Regression test for a bug this harness found (fixed in store/zk by 2e6ecc5): a command running longer than TTL/3 on ZooKeeper
// loses its lease at the first renewal ("lease lost: the store ended the lease") and is stopped,
// although nothing happened. Cause: store/zk's Lost arms ExistsW on the lock node and closes its
// channel on any watch event, and Renew's Set on that node triggers NodeDataChanged. Fix: re-arm
// the watch on NodeDataChanged; end only on NodeDeleted or session loss.
func TestZKLeaseOutlivesFirstRenewal(t *testing.T) {
	dsn := os.Getenv("ONCE_TEST_ZK")
	if dsn == "" {
		if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "zk") {
			t.Fatal("zk is required but ONCE_TEST_ZK is not set: run ./scripts/test")
		}
		t.Skip("ONCE_TEST_ZK not set")
	}
	b := isolate(t, Backend{Name: "zk", DSN: dsn})
	c := exec.Command(onceBinary(t), "run", "--task", "renew", "--ttl", "2s", "--", "sleep", "2")
	c.Env = []string{"ONCE_HOME=" + t.TempDir(), "ONCE_STORE=" + b.DSN, "PATH=" + os.Getenv("PATH")}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("a 2s command with --ttl 2s (three renewals) failed on ZooKeeper: %v\n%s", err, out)
	}
}

var reportMu sync.Mutex

func report(t *testing.T, s *Summary) {
	t.Helper()
	t.Logf("\n%s", s)
	if *reportFlag == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(*reportFlag, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	fmt.Fprint(f, s)
}

// TestChaos runs competing holders under kill -9 (once and command), pauses shorter and longer than
// the TTL and (with -trials) network cuts and blackholes, on every store. The bounded run (no
// -trials) does one trial per fault; network faults are then covered by
// TestNetworkFaultStopsCommandBeforeTakeover and server restarts by TestRestartStoreChaos.
func TestChaos(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t, false) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			r := newRunner(t, b)
			faults := Faults(false, false)
			if *trialsFlag > 0 {
				faults = Faults(b.Networked(), false)
			}
			if faults = only(faults); len(faults) == 0 {
				t.Skipf("-faults %s names none of this store's faults", *faultsFlag)
			}
			runTrials(t, r, faults, *trialsFlag)
		})
	}
}

// Issue 4: a network cut (and a blackhole) between a holder and its store through the proxy: the
// command is stopped before another holder runs (no overlap at all: the stale holder is not
// paused, so nothing is excused), and the slot still succeeds exactly once.
func TestNetworkFaultStopsCommandBeforeTakeover(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t, true) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			r := newRunner(t, b)
			s := runTrials(t, r, []Fault{FaultCut, FaultBlackhole}, 0)
			if s.Excused != 0 {
				t.Errorf("%d overlaps excused under a network fault; none may be", s.Excused)
			}
		})
	}
}

// restarts is how many stores TestRestartStoreChaos restarts at a time: two, as at go test's
// default -parallel on the test machine before this package raised it (parallel); restarting
// every server at once is more load than what it checks needs.
var restarts = make(chan struct{}, 2)

// Issue 4 and 7: the store's server is stopped for a TTL and started again while a holder runs and
// two others wait: no overlap, no stale write accepted, the slot succeeds. Restarts disturb other
// packages, hence the TestRestart name (the test command runs these in their own serial step).
func TestRestartStoreChaos(t *testing.T) {
	for _, b := range backends(t, true) {
		if b.Ctl == "" {
			t.Logf("%s: no control script (%s_CTL): restart not tested", b.Name, strings.ToUpper(b.Name))
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			restarts <- struct{}{}
			defer func() { <-restarts }()
			r := newRunner(t, b)
			runTrials(t, r, []Fault{FaultRestart}, max(*trialsFlag/10, 2))
		})
	}
}
