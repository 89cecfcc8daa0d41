package effect_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/effect"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

func open(t *testing.T, dsn string) store.Keys {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(store.Keys)
}

func newDSN(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "once.db") }

func claimant(id string) store.Claimant { return store.Claimant{RunID: id, Expires: time.Minute} }

func TestCalledOnceThenDone(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	var calls atomic.Int32
	call := func(context.Context) error { calls.Add(1); return nil }
	if out, err := effect.Do(ctx, s, "pay", "order-1", claimant("a"), call, nil); out != effect.Called || err != nil {
		t.Fatalf("first: %v, %v", out, err)
	}
	if out, err := effect.Do(ctx, s, "pay", "order-1", claimant("b"), call, nil); out != effect.AlreadyDone || err != nil {
		t.Fatalf("second: %v, %v", out, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want 1", calls.Load())
	}
}

func TestFailedCallReleasesClaim(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	boom := errors.New("503 from downstream")
	out, err := effect.Do(ctx, s, "pay", "k", claimant("a"), func(context.Context) error { return boom }, nil)
	if out != effect.Failed || !errors.Is(err, boom) {
		t.Fatalf("failed call: %v, %v", out, err)
	}
	if out, err := effect.Do(ctx, s, "pay", "k", claimant("b"), func(context.Context) error { return nil }, nil); out != effect.Called || err != nil {
		t.Fatalf("retry after a failed call: %v, %v; want called", out, err)
	}
}

// A failed call whose claim cannot be released (the store went away between the call and the
// release: here its handle is closed by the call) is Failed with the call's error, and the error
// says the claim stays; a second handle on the same ledger finds the key still pending.
func TestFailedCallClaimNotReleased(t *testing.T) {
	ctx := context.Background()
	dsn := newDSN(t)
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("503 from downstream")
	out, err := effect.Do(ctx, s.(store.Keys), "pay", "k", claimant("a"), func(context.Context) error { s.Close(); return boom }, nil)
	if out != effect.Failed || !errors.Is(err, boom) || !strings.Contains(err.Error(), `the claim on key "k" was not released`) {
		t.Fatalf("failed call, release failed: %v, %v; want Failed with the call's error saying the claim stays", out, err)
	}
	ks, err := open(t, dsn).Lookup(ctx, "pay", []string{"k"})
	if err != nil || len(ks) != 1 || ks[0].State != store.KeyPending {
		t.Fatalf("the key after the release failed: %+v, %v; want pending", ks, err)
	}
}

func TestInFlight(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "pay", Keys: []string{"k"}, Pending: true, Claimant: claimant("live")}); err != nil {
		t.Fatal(err)
	}
	_, err := effect.Do(ctx, s, "pay", "k", claimant("b"), func(context.Context) error { t.Fatal("called"); return nil }, nil)
	if !errors.Is(err, effect.ErrInFlight) {
		t.Fatalf("key pending under a live claimant: %v, want ErrInFlight", err)
	}
}

func TestUnknownReconciled(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	dead := store.Claimant{RunID: "dead", Expires: time.Millisecond}
	if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "pay", Keys: []string{"a", "b", "c"}, Pending: true, Claimant: dead}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	var calls atomic.Int32
	call := func(context.Context) error { calls.Add(1); return nil }
	if _, err := effect.Do(ctx, s, "pay", "a", claimant("x"), call, nil); !errors.Is(err, effect.ErrUnknown) {
		t.Fatalf("unknown without a reconciler: %v, want ErrUnknown", err)
	}
	cannot := effect.ReconcilerFunc(func(context.Context, string, string) (bool, error) { return false, errors.New("timeout") })
	if _, err := effect.Do(ctx, s, "pay", "a", claimant("x"), call, cannot); !errors.Is(err, effect.ErrUnknown) {
		t.Fatalf("reconciler that cannot tell: %v, want ErrUnknown", err)
	}
	yes := effect.ReconcilerFunc(func(context.Context, string, string) (bool, error) { return true, nil })
	if out, err := effect.Do(ctx, s, "pay", "b", claimant("x"), call, yes); out != effect.Reconciled || err != nil {
		t.Fatalf("reconciled as happened: %v, %v", out, err)
	}
	no := effect.ReconcilerFunc(func(context.Context, string, string) (bool, error) { return false, nil })
	if out, err := effect.Do(ctx, s, "pay", "c", claimant("x"), call, no); out != effect.Called || err != nil {
		t.Fatalf("reconciled as not happened: %v, %v", out, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want 1 (only the key that did not happen)", calls.Load())
	}
	if out, _ := effect.Do(ctx, s, "pay", "b", claimant("y"), call, nil); out != effect.AlreadyDone {
		t.Fatalf("reconciled key afterwards: %v, want done", out)
	}
}

// TestConcurrentAttemptsOneCall: attempts on separate clients race for one key; exactly one calls.
func TestConcurrentAttemptsOneCall(t *testing.T) {
	dsn := newDSN(t)
	var calls atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		s := open(t, dsn)
		wg.Go(func() {
			_, err := effect.Do(context.Background(), s, "pay", "k", claimant(string(rune('a'+i))), func(context.Context) error {
				calls.Add(1)
				time.Sleep(20 * time.Millisecond)
				return nil
			}, nil)
			if err != nil && !errors.Is(err, effect.ErrInFlight) {
				t.Errorf("attempt %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want exactly 1", calls.Load())
	}
}

// A call cut short (ErrMaybeApplied: killed mid-call) may have happened: its claim is kept, so the
// next attempt finds the key in flight, then unknown, and never calls blindly.
func TestInterruptedCallKeepsClaim(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	killed := fmt.Errorf("%w: killed by signal 9", effect.ErrMaybeApplied)
	c := store.Claimant{RunID: "a", Expires: time.Second} // the retry below must come within it under -race on a loaded machine
	out, err := effect.Do(ctx, s, "pay", "k", c, func(context.Context) error { return killed }, nil)
	if out != effect.Interrupted || !errors.Is(err, effect.ErrMaybeApplied) {
		t.Fatalf("interrupted call: %v, %v; want interrupted", out, err)
	}
	var calls atomic.Int32
	call := func(context.Context) error { calls.Add(1); return nil }
	if _, err := effect.Do(ctx, s, "pay", "k", claimant("b"), call, nil); !errors.Is(err, effect.ErrInFlight) {
		t.Fatalf("retry while the claim lives: %v; want ErrInFlight", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := effect.Do(ctx, s, "pay", "k", claimant("c"), call, nil); !errors.Is(err, effect.ErrUnknown) {
		t.Fatalf("retry after the claim ended: %v; want ErrUnknown", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d calls after an interrupted one, want 0", calls.Load())
	}
}

// A call cut short by its context (a POST whose ctx was cancelled after it was sent) may have been
// applied: the claim is kept. It was released, and the retry made the call again.
func TestCancelledCallKeepsClaim(t *testing.T) {
	s := open(t, newDSN(t))
	ctx, cancel := context.WithCancel(context.Background())
	call := func(ctx context.Context) error {
		cancel() // the request is sent; then the job is told to stop
		<-ctx.Done()
		return fmt.Errorf("post: %w", ctx.Err())
	}
	c := store.Claimant{RunID: "a", Expires: 300 * time.Millisecond}
	if out, err := effect.Do(ctx, s, "pay", "k", c, call, nil); out != effect.Interrupted || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, %v; want interrupted", out, err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := effect.Do(context.Background(), s, "pay", "k", claimant("b"), func(context.Context) error { return nil }, nil); !errors.Is(err, effect.ErrUnknown) {
		t.Fatalf("retry: %v; want ErrUnknown", err)
	}
	// A call that fails on its own while ctx lives is not applied: released as before.
	if out, _ := effect.Do(context.Background(), s, "pay", "k2", claimant("c"), func(context.Context) error { return context.Canceled }, nil); out != effect.Failed {
		t.Fatalf("a failure while ctx lives: %v, want failed", out)
	}
}

// A call that timed out may have been applied, whoever's timeout it was: an http.Client.Timeout on
// a POST the server received. The claim is kept; it was released, and the retry posted again.
func TestTimedOutCallKeepsClaim(t *testing.T) {
	s := open(t, newDSN(t))
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1) // applied; the answer comes too late
		time.Sleep(300 * time.Millisecond)
	}))
	defer srv.Close()
	client := &http.Client{Timeout: 50 * time.Millisecond}
	call := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		return res.Body.Close()
	}
	out, err := effect.Do(context.Background(), s, "pay", "t", claimant("a"), call, nil)
	if out != effect.Interrupted || err == nil {
		t.Fatalf("timed-out call: %v, %v; want interrupted", out, err)
	}
	if _, err := effect.Do(context.Background(), s, "pay", "t", claimant("b"), call, nil); !errors.Is(err, effect.ErrInFlight) {
		t.Fatalf("retry: %v; want ErrInFlight, not a second POST", err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("%d POSTs, want 1", n)
	}
}

// A call that succeeds while ctx ends (a run's timeout, a stop) is recorded as done: the key was
// left pending and reported unknown though the call had happened, so the next run needed a person.
func TestCalledWhileCtxEndsIsDone(t *testing.T) {
	s := open(t, newDSN(t))
	ctx, cancel := context.WithCancel(context.Background())
	out, err := effect.Do(ctx, s, "pay", "k", claimant("a"), func(context.Context) error { cancel(); return nil }, nil)
	if out != effect.Called || err != nil {
		t.Fatalf("Do = %v, %v; want Called, nil", out, err)
	}
	if out, err := effect.Do(context.Background(), s, "pay", "k", claimant("b"), func(context.Context) error {
		t.Fatal("called again")
		return nil
	}, nil); out != effect.AlreadyDone || err != nil {
		t.Fatalf("next Do = %v, %v; want AlreadyDone", out, err)
	}
}

// A claimant that nothing could ever tell gone (no run's task and token, no expiry) is refused:
// one that died mid-call held its key pending for ever, and every later Do said another attempt
// was calling now (ErrInFlight) instead of ErrUnknown.
func TestClaimantMustBeTellableGone(t *testing.T) {
	s := open(t, newDSN(t))
	never := func(context.Context) error { t.Fatal("called"); return nil }
	for _, c := range []store.Claimant{{}, {RunID: "r"}, {RunID: "r", Task: "t"}, {RunID: "r", Token: 3}, {RunID: "r", Expires: -time.Second}} {
		if _, err := effect.Do(context.Background(), s, "pay", "k", c, never, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("claimant %+v: %v, want store.ErrInvalid", c, err)
		}
	}
	for _, c := range []store.Claimant{{RunID: "r1", Expires: time.Minute}, {RunID: "r2", Task: "t", Token: 3}} {
		if _, err := effect.Do(context.Background(), s, "pay", c.RunID, c, func(context.Context) error { return nil }, nil); err != nil {
			t.Errorf("claimant %+v: %v", c, err)
		}
	}
}

// A nil call is refused before the key is claimed: called after the claim, it panicked and left
// the key pending, so the next attempt with a real call was told another one was calling now.
func TestNilCallRefused(t *testing.T) {
	ctx := context.Background()
	s := open(t, newDSN(t))
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Errorf("panicked: %v", v)
			}
		}()
		if _, err := effect.Do(ctx, s, "pay", "order-1", claimant("a"), nil, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("err %v, want store.ErrInvalid", err)
		}
	}()
	if ks, err := s.Lookup(ctx, "pay", []string{"order-1"}); err != nil || len(ks) != 0 {
		t.Fatalf("keys %+v %v: want the key unclaimed", ks, err)
	}
	if out, err := effect.Do(ctx, s, "pay", "order-1", claimant("b"), func(context.Context) error { return nil }, nil); out != effect.Called || err != nil {
		t.Fatalf("next: %v, %v", out, err)
	}
}
