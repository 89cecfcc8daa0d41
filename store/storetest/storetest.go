// Package storetest is the conformance suite every store backend runs against a real server,
// with the helpers the backends' tests share: the test server's DSN from the environment, fresh
// namespaces, and latency benchmarks.
//
// A backend's test calls Run with a Harness whose DSN func hands out a fresh, isolated
// namespace per call; the backend's package must be imported by that test so its init()
// registers the scheme. The suite only uses store.Open, the store.Store interface and the
// optional interfaces the store implements, and opens the same DSN several times to play
// separate clients (processes, hosts). Run runs every case the store supports and logs the ones
// it leaves out, and why; RunBenchmarks is the same for the benchmarks.
//
// The cases live by area: lease.go (one holder, expiry, renewals, tokens), replace.go (takeovers), ledger.go (attempts,
// events, review), history.go (order, pages, prune), limits.go, combined.go (store.Starter,
// store.Finisher, store.LazyRecorder), refused.go (values no store takes), keys.go (store.Keys), inspect.go (store.Inspector), tasks.go
// (store.TaskLister), running.go (store.RunningLister), lastsuccess.go (store.ReadLastSuccess); helpers.go holds what they share, bench.go the benchmarks, server.go the test
// servers.
//
// Timing assumptions: lease TTLs are at least 1s in the timing tests and a backend may round
// a TTL up to whole seconds; every wait is bounded by TTL + 2s.
package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// Harness tells the suite how to reach a backend.
type Harness struct {
	// DSN returns the DSN of a fresh, empty, isolated store (a new file, database or ?prefix=).
	// Every call returns a namespace no other call returns. The suite opens it with store.Open,
	// several times when it needs several clients. tb is the test or the benchmark that uses it:
	// tb.TempDir and tb.Cleanup work for both.
	DSN func(tb testing.TB) string
}

// Tolerances the suite allows a backend.
const (
	// granularity is how much a backend may round a TTL up (whole seconds).
	granularity = time.Second
	// timeSlack covers time representation (ms vs µs) and two clients reading one clock.
	timeSlack = 50 * time.Millisecond
	// opTimeout bounds any single store call.
	opTimeout = 15 * time.Second
	// caseTimeout bounds the store calls a case makes under its one context (ctxT): on a loaded
	// machine a case's calls together can take longer than one call may (the prefix suite queues
	// every case's writes for one SQLite file's writer: a case took 18.6 s in a CI run). A hang
	// still fails, after a minute.
	caseTimeout = time.Minute
)

// capability is an optional interface of a store (see store.Store's doc) that some cases need.
type capability struct {
	name string
	has  func(store.Store) bool
}

func implements[I any](name string) *capability {
	return &capability{name, func(s store.Store) bool { _, ok := s.(I); return ok }}
}

var (
	capStarter   = implements[store.Starter]("store.Starter")
	capLazyStart = implements[store.LazyStarter]("store.LazyStarter")
	capFinisher  = implements[store.Finisher]("store.Finisher")
	capLazy      = implements[store.LazyRecorder]("store.LazyRecorder")
	capKeys      = implements[store.Keys]("store.Keys")
	capInspector = implements[store.Inspector]("store.Inspector")
	capClock     = implements[store.Clock]("store.Clock")
	capLoss      = implements[store.LossNotifier]("store.LossNotifier")
	capTasks     = implements[store.TaskLister]("store.TaskLister")
	capScopes    = implements[store.ScopeLister]("store.ScopeLister")
	capRunning   = implements[store.RunningLister]("store.RunningLister")
	capSlots     = implements[store.SlotsReader]("store.SlotsReader")
)

// testCase is one conformance case; needs, when set, is the interface it tests.
type testCase struct {
	name  string
	fn    func(t *testing.T, h Harness)
	needs *capability
}

// cases is the whole suite, in the order Run starts them.
var cases = []testCase{
	{"LeaseExclusive", testLeaseExclusive, nil},
	{"LeaseExpiryTakeover", testLeaseExpiry, nil},
	{"LeaseRenew", testLeaseRenew, nil},
	{"LeaseNotOwner", testLeaseNotOwner, nil},
	{"LeaseRelease", testLeaseRelease, nil},
	{"LeaseReleaseExpired", testLeaseReleaseExpired, nil},
	{"LeaseTokensIncrease", testTokensIncrease, nil},
	{"LeaseTasksIndependent", testTasksIndependent, nil},
	{"LeaseReplace", testLeaseReplace, nil},
	{"LeaseReplaceFencesAtOnce", testReplaceFencesAtOnce, nil},
	{"LeaseReplaceEndsEverySeat", testReplaceEndsEverySeat, nil},
	{"LeaseLimit", testLeaseLimit, nil},
	{"LeaseLimitExpiry", testLeaseLimitExpiry, nil},
	{"LeaseLimitRace", testLeaseLimitRace, nil},
	{"StoreClock", testStoreClock, nil},
	{"StoreClosed", testStoreClosed, nil},
	{"LedgerBeginFinish", testBeginFinish, nil},
	{"LedgerFinishUnknown", testFinishUnknown, nil},
	{"LedgerStaleToken", testStaleToken, nil},
	{"LedgerAbandonResolve", testAbandonResolve, nil},
	{"LedgerReport", testReport, nil},
	{"LedgerEventsHistory", testEventsHistory, nil},
	{"LedgerMissedEvent", testMissedEvent, nil},
	{"LedgerReviewFailures", testReviewFailures, nil},
	{"LedgerResolveIllegal", testResolveIllegal, nil},
	{"LedgerBeginRace", testBeginRace, nil},
	{"LedgerBeginAfterResolvedDone", testBeginAfterResolvedDone, nil},
	{"LedgerBeginResolveRace", testBeginResolveRace, nil},
	{"LedgerLimits", testLimits, nil},
	{"LedgerWaitingOrder", testWaitingOrder, nil},
	{"LedgerHistoryPages", testHistoryPages, nil},
	{"LedgerPrune", testPrune, nil},
	{"LedgerPruneForget", testPruneForget, nil},
	{"LedgerPruneSlotless", testPruneSlotless, nil},
	{"LedgerPruneMissed", testPruneMissed, nil},
	{"LedgerLongSlot", testLongSlot, nil},
	{"LedgerFailuresCounted", testFailuresCounted, nil},
	{"LedgerLastSuccess", testLastSuccess, nil},
	{"LedgerRefusedValues", testRefusedValues, nil},
	{"Start", testStart, capStarter},
	{"StartLazy", testStartLazy, capLazyStart},
	{"FinishRelease", testFinishRelease, capFinisher},
	{"RecordLazy", testRecordLazy, capLazy},
	{"Inspect", testInspect, capInspector},
	{"Tasks/Known", testTasksKnown, capTasks},
	{"Tasks/Pages", testTasksPages, capTasks},
	{"Tasks/Prefix", testTasksPrefix, capTasks},
	{"Running/List", testRunningList, capRunning},
	{"Slots/Read", testSlotsRead, capSlots},
	{"Keys/ClaimRefused", testKeysRefused, capKeys},
	{"Keys/ClaimInputOrder", testKeysOrder, capKeys},
	{"Keys/ClaimLargeBatch", testKeysLarge, capKeys},
	{"Keys/ClaimScopes", testKeysScopes, capKeys},
	{"Keys/ClaimConcurrentUnionOnce", testKeysConcurrent, capKeys},
	{"Keys/Fingerprint", testKeysFingerprint, capKeys},
	{"Keys/FingerprintMissing", testKeysFingerprintMissing, capKeys},
	{"Keys/PendingComplete", testKeysComplete, capKeys},
	{"Keys/ResultLimit", testKeysResultLimit, capKeys},
	{"Keys/ExpiredClaimantReclaim", testKeysExpired, capKeys},
	{"Keys/RunClaimantTokenMovedOn", testKeysRunClaimant, capKeys},
	{"Keys/RunClaimantRunEnded", testKeysRunEnded, capKeys},
	{"Keys/RunClaimantRunEndedGuards", testKeysRunEndedGuards, capKeys},
	{"Keys/Forget", testKeysForget, capKeys},
	{"Keys/ReleaseKeys", testKeysRelease, capKeys},
	{"Scopes/Walk", testScopesWalk, capScopes},
	{"Scopes/Keys", testScopesKeys, capScopes},
}

// partial lists the interfaces some cases use when the store has them and check less without.
var partial = []struct {
	needs *capability
	less  string
}{
	{capClock, "StoreClock does not compare the store's clock with its grants"},
	{capLoss, "LeaseRenew does not check that renewals are not announced as losses"},
}

// RunKeys runs the conformance cases of store.Keys only (Keys/…), in parallel, each on its own DSN:
// for a backend that has a second claim path to cover on the same server.
func RunKeys(t *testing.T, h Harness) {
	t.Helper()
	if !capKeys.has(client(t, h.DSN(t))) {
		t.Fatal("storetest: RunKeys: the store does not implement store.Keys")
	}
	for _, tc := range cases {
		if tc.needs != capKeys {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// Run runs every conformance case the store behind h supports, in parallel, each on its own DSN.
// It opens one store first to learn which optional interfaces it implements, and logs (t.Log)
// each case it leaves out and each case that checks less, with the reason.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.DSN == nil {
		t.Fatal("storetest: Harness.DSN is nil")
	}
	probe := client(t, h.DSN(t))
	skipped := map[*capability][]string{}
	var order []*capability
	for _, tc := range cases {
		if tc.needs != nil && !tc.needs.has(probe) {
			if skipped[tc.needs] == nil {
				order = append(order, tc.needs)
			}
			skipped[tc.needs] = append(skipped[tc.needs], tc.name)
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
	for _, c := range order {
		t.Logf("storetest: %T does not implement %s: skipped %s", probe, c.name, strings.Join(skipped[c], ", "))
	}
	for _, p := range partial {
		if !p.needs.has(probe) {
			t.Logf("storetest: %T does not implement %s: %s", probe, p.needs.name, p.less)
		}
	}
}
