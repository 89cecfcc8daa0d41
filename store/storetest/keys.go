package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The store.Keys cases (business idempotency keys). They use several clients (separate
// store.Open calls) where concurrency matters.

// keysClient opens a separate client on dsn as store.Keys.
func keysClient(t *testing.T, dsn string) store.Keys {
	t.Helper()
	s := client(t, dsn)
	k, ok := s.(store.Keys)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.Keys", s)
	}
	return k
}

func claim(t *testing.T, k store.Keys, req store.ClaimRequest) []bool {
	t.Helper()
	return claimCtx(ctxT(t), t, k, req)
}

func claimCtx(ctx context.Context, t *testing.T, k store.Keys, req store.ClaimRequest) []bool {
	t.Helper()
	got, err := k.Claim(ctx, req)
	if err != nil {
		t.Fatalf("Claim(%q, %d keys): %v", req.Scope, len(req.Keys), err)
	}
	if len(got) != len(req.Keys) {
		t.Fatalf("Claim returned %d results for %d keys", len(got), len(req.Keys))
	}
	return got
}

func lookup(t *testing.T, k store.Keys, scope string, keys ...string) map[string]store.Key {
	t.Helper()
	got, err := k.Lookup(ctxT(t), scope, keys)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	m := map[string]store.Key{}
	for _, x := range got {
		if _, dup := m[x.Key]; dup {
			t.Fatalf("Lookup returned key %q twice", x.Key)
		}
		m[x.Key] = x
	}
	return m
}

func stateOf(t *testing.T, k store.Keys, scope, key string) store.KeyState {
	t.Helper()
	x, ok := lookup(t, k, scope, key)[key]
	if !ok {
		return ""
	}
	return x.State
}

// waitState polls until key is in state want, for at most ttl plus the suite's tolerances.
func waitState(t *testing.T, k store.Keys, scope, key string, want store.KeyState, ttl time.Duration) {
	t.Helper()
	deadline := time.Now().Add(ttl + granularity + 2*time.Second)
	for {
		got := stateOf(t, k, scope, key)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q: state %q, want %q within %s", key, got, want, ttl+granularity+2*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testKeysOrder(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	got := claim(t, k, store.ClaimRequest{Scope: "s", Keys: []string{"a", "b", "c"}})
	if !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("first claim: %v, want all true", got)
	}
	// Old keys false, new keys true, a repeat inside one request counts once (its first place).
	got = claim(t, k, store.ClaimRequest{Scope: "s", Keys: []string{"d", "b", "a", "e", "d", "c", "e"}})
	if want := []bool{true, false, false, true, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("second claim: %v, want %v", got, want)
	}
	got = claim(t, k, store.ClaimRequest{Scope: "s", Keys: nil})
	if len(got) != 0 {
		t.Fatalf("empty claim: %v", got)
	}
	m := lookup(t, k, "s", "a", "b", "c", "d", "e", "zz")
	if len(m) != 5 {
		t.Fatalf("Lookup found %d keys, want 5 (a missing key is absent): %v", len(m), m)
	}
	for _, x := range m {
		if x.State != store.KeyDone || x.Scope != "s" || x.ClaimedAt.IsZero() {
			t.Fatalf("key %+v: want done with scope and claim time", x)
		}
	}
}

func testKeysLarge(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	keys := make([]string, 20000)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%06d", i)
	}
	// One call for 20,000 keys is many requests on some stores (etcd: a transaction per 128
	// keys, each a TLS request on the TLS variant): under load one took more than opTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 8*opTimeout)
	defer cancel()
	half := claimCtx(ctx, t, k, store.ClaimRequest{Scope: "big", Keys: keys[:10000]})
	if slices.Contains(half, false) {
		t.Fatal("first half: a new key was not claimed")
	}
	got := claimCtx(ctx, t, k, store.ClaimRequest{Scope: "big", Keys: keys})
	for i, ok := range got {
		if ok != (i >= 10000) {
			t.Fatalf("key %d: claimed %v, want %v", i, ok, i >= 10000)
		}
	}
	found, err := k.Lookup(ctx, "big", keys)
	if err != nil {
		t.Fatalf("Lookup of %d keys: %v", len(keys), err)
	}
	if len(found) != len(keys) {
		t.Fatalf("Lookup found %d of %d keys", len(found), len(keys))
	}
}

func testKeysScopes(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	for _, scope := range []string{"one", "two"} {
		if got := claim(t, k, store.ClaimRequest{Scope: scope, Keys: []string{"k"}}); !got[0] {
			t.Fatalf("scope %s: key not claimed; scopes must be independent", scope)
		}
	}
	if _, err := k.Claim(ctxT(t), store.ClaimRequest{Scope: "", Keys: []string{"k"}}); err == nil {
		t.Fatal("Claim with an empty scope: no error")
	}
}

// testKeysConcurrent: clients claim overlapping sets in batches, in different orders; every key
// of the union is claimed by exactly one of them.
func testKeysConcurrent(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	const clients, perClient, batch = 4, 1500, 250
	union := map[string]int{}
	sets := make([][]string, clients)
	for c := range clients {
		for i := range perClient {
			key := fmt.Sprintf("k%05d", c*perClient/2+i) // each set overlaps half of the next
			sets[c] = append(sets[c], key)
			union[key] = 0
		}
		if c%2 == 1 {
			slices.Reverse(sets[c])
		}
	}
	ks := make([]store.Keys, clients)
	for c := range ks {
		ks[c] = keysClient(t, dsn)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for lo := 0; lo < len(sets[c]); lo += batch {
				b := sets[c][lo:min(lo+batch, len(sets[c]))]
				got, err := ks[c].Claim(ctxT(t), store.ClaimRequest{Scope: "race", Keys: b})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, ok := range got {
					if ok {
						union[b[i]]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Claim: %v", err)
	}
	for key, n := range union {
		if n != 1 {
			t.Fatalf("key %q claimed %d times by concurrent clients, want exactly 1", key, n)
		}
	}
}

func testKeysFingerprint(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	ctx := ctxT(t)
	claim(t, k, store.ClaimRequest{Scope: "fp", Keys: []string{"a", "b"}, Fingerprints: []string{"fa", "fb"}})
	got := claim(t, k, store.ClaimRequest{Scope: "fp", Keys: []string{"a", "c"}, Fingerprints: []string{"fa", "fc"}})
	if !slices.Equal(got, []bool{false, true}) {
		t.Fatalf("same fingerprint: %v, want [false true]", got)
	}
	_, err := k.Claim(ctx, store.ClaimRequest{Scope: "fp", Keys: []string{"new", "b"}, Fingerprints: []string{"fn", "OTHER"}})
	if !errors.Is(err, store.ErrFingerprint) {
		t.Fatalf("different fingerprint: %v, want ErrFingerprint", err)
	}
	if st := stateOf(t, k, "fp", "new"); st != "" {
		t.Fatalf("a request failing with ErrFingerprint claimed key \"new\" (%s): it must claim nothing", st)
	}
	_, err = k.Claim(ctx, store.ClaimRequest{Scope: "fp", Keys: []string{"x", "x"}, Fingerprints: []string{"1", "2"}})
	if !errors.Is(err, store.ErrFingerprint) {
		t.Fatalf("one key twice with two fingerprints in one request: %v, want ErrFingerprint", err)
	}
	if x := lookup(t, k, "fp", "a")["a"]; x.Fingerprint != "fa" {
		t.Fatalf("Lookup fingerprint %q, want fa", x.Fingerprint)
	}
}

// testKeysFingerprintMissing: a fingerprint is compared only when the stored one and the given one
// are both non-empty (store.CheckFingerprint), in both orders: a key claimed without one (once keys,
// once effect, an older once) and claimed again with one is a duplicate, not ErrFingerprint.
func testKeysFingerprintMissing(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	claim(t, k, store.ClaimRequest{Scope: "fp", Keys: []string{"bare"}})
	claim(t, k, store.ClaimRequest{Scope: "fp", Keys: []string{"printed"}, Fingerprints: []string{"f1"}})
	for _, c := range []struct {
		name string
		req  store.ClaimRequest
	}{
		{"stored without, claimed with", store.ClaimRequest{Keys: []string{"bare"}, Fingerprints: []string{"f2"}}},
		{"stored without, claimed pending with", store.ClaimRequest{Keys: []string{"bare"}, Fingerprints: []string{"f2"},
			Pending: true, Claimant: store.Claimant{RunID: "r1", Expires: time.Minute}}},
		{"stored with, claimed without", store.ClaimRequest{Keys: []string{"printed"}}},
		{"stored with, claimed with empty", store.ClaimRequest{Keys: []string{"printed"}, Fingerprints: []string{""}}},
	} {
		c.req.Scope = "fp"
		if got := claim(t, k, c.req); !slices.Equal(got, []bool{false}) {
			t.Fatalf("%s: %v, want [false] (a duplicate)", c.name, got)
		}
	}
	got := claim(t, k, store.ClaimRequest{Scope: "fp", Keys: []string{"y", "y", "y"}, Fingerprints: []string{"", "f1", "f1"}})
	if !slices.Equal(got, []bool{true, false, false}) {
		t.Fatalf("one key three times, the first without fingerprint: %v, want [true false false]", got)
	}
	// Two fingerprints that differ are compared even when the key's first occurrence has none.
	_, err := k.Claim(ctxT(t), store.ClaimRequest{Scope: "fp", Keys: []string{"z", "z", "z"}, Fingerprints: []string{"", "f1", "f2"}})
	if !errors.Is(err, store.ErrFingerprint) {
		t.Fatalf("one key three times, without fingerprint, then with f1, then with f2: %v, want ErrFingerprint", err)
	}
	ks := lookup(t, k, "fp", "bare", "printed")
	if ks["bare"].Fingerprint != "" || ks["printed"].Fingerprint != "f1" || ks["bare"].State != store.KeyDone {
		t.Fatalf("a duplicate claim changed the stored keys: %+v", ks)
	}
	_, err = k.Claim(ctxT(t), store.ClaimRequest{Scope: "fp", Keys: []string{"printed"}, Fingerprints: []string{"f2"}})
	if !errors.Is(err, store.ErrFingerprint) {
		t.Fatalf("two non-empty fingerprints that differ: %v, want ErrFingerprint", err)
	}
}

func testKeysComplete(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	ctx := ctxT(t)
	c := store.Claimant{RunID: "run-1", Expires: time.Minute}
	got := claim(t, k, store.ClaimRequest{Scope: "p", Keys: []string{"a", "b"}, Pending: true, Claimant: c})
	if !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("pending claim: %v", got)
	}
	if got := claim(t, k, store.ClaimRequest{Scope: "p", Keys: []string{"a"}, Pending: true, Claimant: store.Claimant{RunID: "run-2", Expires: time.Minute}}); got[0] {
		t.Fatal("a pending key was claimed again by another claimant")
	}
	x := lookup(t, k, "p", "a")["a"]
	if x.State != store.KeyPending || x.RunID != "run-1" {
		t.Fatalf("pending key: %+v, want pending under run-1", x)
	}
	if ch, err := k.Reclaim(ctx, "p", []string{"a"}, &store.Claimant{RunID: "thief", Expires: time.Minute}, false); err != nil || len(ch) != 0 {
		t.Fatalf("Reclaim of a key under a live claimant: changed %v, err %v; want nothing changed", ch, err)
	}
	if err := k.Complete(ctx, "p", []string{"a"}, "run-2", nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Complete by another run: %v, want ErrConflict", err)
	}
	if err := k.Complete(ctx, "p", []string{"never"}, "run-1", nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Complete of a key never claimed: %v, want ErrConflict", err)
	}
	if err := k.Complete(ctx, "p", []string{"a", "b"}, "run-1", []byte("result\x00bytes")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	m := lookup(t, k, "p", "a", "b")
	for _, key := range []string{"a", "b"} {
		if x := m[key]; x.State != store.KeyDone || string(x.Result) != "result\x00bytes" || x.DoneAt.IsZero() {
			t.Fatalf("completed key %q: %+v, want done with the result bytes and a done time", key, x)
		}
	}
	// Done keys, claimed as done at once, have no result.
	claim(t, k, store.ClaimRequest{Scope: "p", Keys: []string{"d"}})
	if x := lookup(t, k, "p", "d")["d"]; x.State != store.KeyDone || len(x.Result) != 0 {
		t.Fatalf("key claimed done: %+v", x)
	}
}

// testKeysResultLimit: a result of store.MaxKeyResult bytes is kept whole on every store (idemhttp
// stores a response there); a larger one is refused before anything is written, and the key stays
// pending. etcd and ZooKeeper failed on about 1 MB while writing, so idemhttp left the key pending
// and executed the request again after its TTL.
func testKeysResultLimit(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	ctx := ctxT(t)
	c := store.Claimant{RunID: "big", Expires: time.Minute}
	claim(t, k, store.ClaimRequest{Scope: "r", Keys: []string{"at", "over"}, Pending: true, Claimant: c})
	res := make([]byte, store.MaxKeyResult)
	for i := range res {
		res[i] = byte(i * 7)
	}
	if err := k.Complete(ctx, "r", []string{"over"}, "big", append(res, 1)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Complete with a result over MaxKeyResult: %v, want ErrInvalid", err)
	}
	if x := lookup(t, k, "r", "over")["over"]; x.State != store.KeyPending {
		t.Fatalf("key after a refused result: %+v, want still pending", x)
	}
	if err := k.Complete(ctx, "r", []string{"at"}, "big", res); err != nil {
		t.Fatalf("Complete with a result of MaxKeyResult bytes: %v", err)
	}
	if x := lookup(t, k, "r", "at")["at"]; x.State != store.KeyDone || !slices.Equal(x.Result, res) {
		t.Fatalf("completed key: state %s, %d result bytes; want done with the %d bytes", x.State, len(x.Result), len(res))
	}
}

func testKeysExpired(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	k, other := keysClient(t, dsn), keysClient(t, dsn)
	ctx := ctxT(t)
	ttl := time.Second
	c := store.Claimant{RunID: "dies", Expires: ttl}
	claim(t, k, store.ClaimRequest{Scope: "e", Keys: []string{"a", "b", "c"}, Pending: true, Claimant: c})
	waitState(t, other, "e", "a", store.KeyUnknown, ttl)
	// Unknown keys are not handed out again by Claim.
	if got := claim(t, other, store.ClaimRequest{Scope: "e", Keys: []string{"a"}}); got[0] {
		t.Fatal("Claim handed out a key whose claimant is gone (unknown)")
	}
	// Reclaim: a to a new claimant, b as done, c deleted.
	next := &store.Claimant{RunID: "next", Expires: time.Minute}
	ch, err := other.Reclaim(ctx, "e", []string{"a", "zz"}, next, false)
	if err != nil || !slices.Equal(ch, []string{"a"}) {
		t.Fatalf("Reclaim to a claimant: %v, %v; want [a]", ch, err)
	}
	if ch, err := k.Reclaim(ctx, "e", []string{"a"}, &store.Claimant{RunID: "late", Expires: time.Minute}, false); err != nil || len(ch) != 0 {
		t.Fatalf("second Reclaim of the same key: %v, %v; want nothing (it is pending under a live claimant)", ch, err)
	}
	if x := lookup(t, other, "e", "a")["a"]; x.State != store.KeyPending || x.RunID != "next" {
		t.Fatalf("reclaimed key: %+v, want pending under next", x)
	}
	if err := k.Complete(ctx, "e", []string{"a"}, "dies", nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Complete by the gone claimant after Reclaim: %v, want ErrConflict", err)
	}
	if err := other.Complete(ctx, "e", []string{"a"}, "next", []byte("ok")); err != nil {
		t.Fatalf("Complete by the new claimant: %v", err)
	}
	if ch, err := other.Reclaim(ctx, "e", []string{"b"}, nil, true); err != nil || !slices.Equal(ch, []string{"b"}) {
		t.Fatalf("Reclaim as done: %v, %v", ch, err)
	}
	if st := stateOf(t, other, "e", "b"); st != store.KeyDone {
		t.Fatalf("key reclaimed as done: state %q", st)
	}
	if ch, err := other.Reclaim(ctx, "e", []string{"c"}, nil, false); err != nil || !slices.Equal(ch, []string{"c"}) {
		t.Fatalf("Reclaim to delete: %v, %v", ch, err)
	}
	if got := claim(t, other, store.ClaimRequest{Scope: "e", Keys: []string{"c"}}); !got[0] {
		t.Fatal("a key deleted by Reclaim could not be claimed again")
	}
	if ch, err := other.Reclaim(ctx, "e", []string{"a", "b"}, nil, false); err != nil || len(ch) != 0 {
		t.Fatalf("Reclaim of done keys: %v, %v; want nothing changed", ch, err)
	}
}

func testKeysRunClaimant(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	k := keysClient(t, dsn)
	ctx := ctxT(t)
	// A long lease while the key is checked pending (a loaded machine, or SQLite's one writer
	// shared by every case of TestConformancePrefix, can take seconds over the claim), then one
	// renewed to expire at once.
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h1", RunID: "run-a", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	c := store.Claimant{Task: "job", RunID: "run-a", Token: l.Token}
	claim(t, k, store.ClaimRequest{Scope: "job", Keys: []string{"a", "b"}, Pending: true, Claimant: c})
	if st := stateOf(t, k, "job", "a"); st != store.KeyPending {
		t.Fatalf("key pending under a live run: state %q, want pending", st)
	}
	// The run dies; its lease expires and another run takes the task over.
	// A store may find the 1 ms grant expired by the time it reads it back (ErrNotHeld): expired
	// either way.
	if _, err := s.Renew(ctx, l, time.Millisecond); err != nil && !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew to expire: %v", err)
	}
	var l2 store.Lease
	deadline := time.Now().Add(granularity + 3*time.Second)
	for {
		l2, err = s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h2", RunID: "run-b", TTL: time.Minute})
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("Acquire after expiry: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := stateOf(t, k, "job", "a"); st != store.KeyUnknown {
		t.Fatalf("key pending under a run whose lease token moved on: state %q, want unknown", st)
	}
	c2 := &store.Claimant{Task: "job", RunID: "run-b", Token: l2.Token}
	if ch, err := k.Reclaim(ctx, "job", []string{"a"}, c2, false); err != nil || !slices.Equal(ch, []string{"a"}) {
		t.Fatalf("Reclaim by the next run: %v, %v", ch, err)
	}
	if st := stateOf(t, k, "job", "a"); st != store.KeyPending {
		t.Fatalf("key reclaimed by the live run: state %q, want pending", st)
	}
	if err := k.Complete(ctx, "job", []string{"a"}, "run-b", nil); err != nil {
		t.Fatalf("Complete by the next run: %v", err)
	}
}

// testKeysForget: Forget deletes old done keys, and old pending keys whose claimant is gone (unknown:
// maybe done), only when asked (includeDone), and never a key pending under a live claimant, however
// old (a run still doing its work: forgotten, the key could be claimed again and the work done twice).
func testKeysForget(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	k := keysClient(t, dsn)
	ctx := ctxT(t)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "fjob", Holder: "h1", RunID: "run-live", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer s.Release(ctx, l)
	claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"d1", "d2"}})
	claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"p1"}, Pending: true, Claimant: store.Claimant{RunID: "r", Expires: time.Minute}})
	claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"p2"}, Pending: true, Claimant: store.Claimant{Task: "fjob", RunID: "run-live", Token: l.Token}})
	claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"g1"}, Pending: true, Claimant: store.Claimant{RunID: "gone", Expires: time.Millisecond}})
	claim(t, k, store.ClaimRequest{Scope: "other", Keys: []string{"d1", "p1"}})
	waitState(t, k, "f", "g1", store.KeyUnknown, time.Second)
	if n, err := k.Forget(ctx, "f", time.Now().Add(-time.Hour), true); err != nil || n != 0 {
		t.Fatalf("Forget before an hour ago: %d, %v; want 0", n, err)
	}
	later := time.Now().Add(time.Minute)
	n, err := k.Forget(ctx, "f", later, false)
	if err != nil || n != 0 {
		t.Fatalf("Forget without done keys: %d, %v; want 0 (g1 is unknown: its work may have happened, and forgotten it would be done again)", n, err)
	}
	if m := lookup(t, k, "f", "d1", "d2", "p1", "p2", "g1"); len(m) != 5 {
		t.Fatalf("after Forget: %v, want every key kept", m)
	}
	if n, err := k.Forget(ctx, "f", later, true); err != nil || n != 3 {
		t.Fatalf("Forget with done keys: %d, %v; want 3 (d1, d2 and the unknown g1; the live claimants' kept)", n, err)
	}
	if m := lookup(t, k, "f", "g1"); len(m) != 0 {
		t.Fatalf("after Forget with done keys: %v, want the unknown g1 forgotten", m)
	}
	if got := claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"p1", "p2"}}); got[0] || got[1] {
		t.Fatal("a key pending under a live claimant could be claimed again after Forget")
	}
	if got := claim(t, k, store.ClaimRequest{Scope: "f", Keys: []string{"d1"}}); !got[0] {
		t.Fatal("a forgotten key could not be claimed again")
	}
	if m := lookup(t, k, "other", "d1", "p1"); len(m) != 2 {
		t.Fatalf("Forget of scope f touched scope other: %v", m)
	}
}

// testKeysRelease: a claimant releases its own pending keys, which can then be claimed again; keys
// done, pending under another claimant, or never claimed are left alone without error.
func testKeysRelease(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	k, other := keysClient(t, dsn), keysClient(t, dsn)
	ctx := ctxT(t)
	mine := store.Claimant{RunID: "mine", Expires: time.Minute}
	claim(t, k, store.ClaimRequest{Scope: "r", Keys: []string{"p1", "p2", "d"}, Pending: true, Claimant: mine})
	claim(t, other, store.ClaimRequest{Scope: "r", Keys: []string{"theirs"}, Pending: true, Claimant: store.Claimant{RunID: "theirs", Expires: time.Minute}})
	claim(t, other, store.ClaimRequest{Scope: "r", Keys: []string{"done"}})
	claim(t, other, store.ClaimRequest{Scope: "other", Keys: []string{"p1"}, Pending: true, Claimant: mine})
	if err := k.Complete(ctx, "r", []string{"d"}, "mine", nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := k.ReleaseKeys(ctx, "r", []string{"p1", "p2", "d", "theirs", "done", "never", "p1"}, "mine"); err != nil {
		t.Fatalf("ReleaseKeys: %v", err)
	}
	m := lookup(t, other, "r", "p1", "p2", "d", "theirs", "done", "never")
	if _, ok := m["p1"]; ok {
		t.Fatalf("released key p1 still stored: %+v", m["p1"])
	}
	if _, ok := m["p2"]; ok {
		t.Fatalf("released key p2 still stored: %+v", m["p2"])
	}
	if m["d"].State != store.KeyDone || m["done"].State != store.KeyDone {
		t.Fatalf("ReleaseKeys touched done keys: %+v, %+v", m["d"], m["done"])
	}
	if x := m["theirs"]; x.State != store.KeyPending || x.RunID != "theirs" {
		t.Fatalf("ReleaseKeys by run mine touched a key pending under run theirs: %+v", x)
	}
	if _, ok := m["never"]; ok {
		t.Fatal("ReleaseKeys created a key")
	}
	if st := stateOf(t, other, "other", "p1"); st != store.KeyPending {
		t.Fatalf("ReleaseKeys of scope r touched scope other: state %q", st)
	}
	if got := claim(t, other, store.ClaimRequest{Scope: "r", Keys: []string{"p1", "p2", "theirs"}}); !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("claim after release: %v, want [true true false]", got)
	}
	if err := k.Complete(ctx, "r", []string{"p1"}, "mine", nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Complete of a released (then re-claimed as done) key by its old claimant: %v, want ErrConflict", err)
	}
}
