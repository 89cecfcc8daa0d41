package kvstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-run/once/store"
)

// KeyRec is one business idempotency key as the key-value stores keep it (store.Keys), encoded as
// JSON. Times are Unix microseconds by the store's clock.
type KeyRec struct {
	State   store.KeyState `json:"s"`
	FP      string         `json:"f,omitempty"`
	Task    string         `json:"t,omitempty"`
	RunID   string         `json:"r,omitempty"`
	Token   int64          `json:"k,omitempty"`
	TTL     int64          `json:"l,omitempty"` // µs a pending claim lives from Claimed; 0: no expiry
	Claimed int64          `json:"c,omitempty"` // 0 in a record given to Create: the backend stamps it
	Done    int64          `json:"d,omitempty"`
	Nonce   string         `json:"n,omitempty"` // the Claim call that created the record
	Result  []byte         `json:"x,omitempty"`
}

// Encode returns the record's JSON.
func (r *KeyRec) Encode() []byte {
	b, err := json.Marshal(r)
	if err != nil { // only plain data: cannot fail
		panic(err)
	}
	return b
}

// DecodeKeyRec decodes the stored record of key; a corrupt one is ErrUnavailable, named with its
// key and what to do (once decides nothing on it, and cannot forget it).
func DecodeKeyRec(key string, b []byte) (KeyRec, error) {
	var r KeyRec
	err := json.Unmarshal(b, &r)
	if err == nil {
		err = r.check()
	}
	if err != nil {
		return r, fmt.Errorf("%w: corrupt record of business key %q: %v (not one once writes: restore it from a backup, or delete it in the store, which lets the key be claimed again)",
			store.ErrUnavailable, store.Clip(key, 64), err)
	}
	return r, nil
}

// maxMicros bounds a record's times and TTL: the end of year 9999. Claimed+TTL, when a pending
// claim expires, then never overflows (a TTL of 9223372036854775807 from another writer wrapped
// it into the past, and the claim of a key whose work may be running was reported unknown).
const maxMicros = 253402300799999999

// check refuses what no once writes: a state other than pending or done (a key in any other was
// neither claimable nor done), a time or TTL out of range.
func (r *KeyRec) check() error {
	if r.State != store.KeyPending && r.State != store.KeyDone {
		return fmt.Errorf("state %q is neither pending nor done", store.Clip(string(r.State), 64))
	}
	for _, n := range []int64{r.TTL, r.Claimed, r.Done} {
		if n < 0 || n > maxMicros {
			return fmt.Errorf("time %d out of range", n)
		}
	}
	return nil
}

// StoredKey is a record with the backend's opaque version of it.
type StoredKey struct {
	Rec KeyRec
	Ver string
}

// KeyChange replaces the record of Key, still at version Ver, with Rec, or deletes it (Rec nil).
type KeyChange struct {
	Key string
	Ver string
	Rec *KeyRec
}

// KeyKV is what a key-value backend provides for store.Keys. Methods return store sentinels.
type KeyKV interface {
	// Create stores recs[i] under keys[i] in scope where that key does not exist, and reports which
	// it created; concurrent creators of one key never both succeed. keys are unique and at most
	// Batch() long. A record with Claimed 0 is stamped with the store's time of the write.
	Create(ctx context.Context, scope string, keys []string, recs []KeyRec) ([]bool, error)
	// Get returns the records of keys that exist (at most Batch() keys), with their versions.
	Get(ctx context.Context, scope string, keys []string) (map[string]StoredKey, error)
	// Apply makes all changes (at most Batch()) at once when every record is still at its version,
	// and reports false, changing nothing, when one moved.
	Apply(ctx context.Context, scope string, changes []KeyChange) (bool, error)
	// Now returns the store's clock (the client's when the store has none).
	Now(ctx context.Context) (time.Time, error)
	// Leases lists the live lease grants (store.Leaser's Leases).
	Leases(ctx context.Context) ([]store.Lease, error)
	// Batch is the most keys one Create, Get or Apply takes.
	Batch() int
	// Scopes returns at most limit scopes that hold keys, after cursor ("" for the first page), and
	// the next cursor ("" at the end): a page of store.ScopeLister's Scopes.
	Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error)
	// Page returns about limit keys of scope after cursor, with their records, and the next cursor
	// ("" at the end): a page of store.ScopeLister's ScopeKeys, before the claimants are judged.
	Page(ctx context.Context, scope, cursor string, limit int) ([]string, []KeyRec, string, error)
}

// Keys implements store.Keys over a KeyKV. Name prefixes its errors ("redis", "etcd", "zk").
//
// A claim is Create per batch; every other operation reads the records, decides in Go, and writes
// with Apply (a compare-and-set on the versions read), trying again when a record moved. A pending
// key's claimant is gone (store.Claimant) when its TTL has passed by Now, or, for a run claimant,
// when Leases has no live grant of its task with its token, or when Runs records its run's attempt
// and it is no longer running: all only ever turn from live to gone, so a decision read before the
// compare-and-set stays true as long as the record did not move.
type Keys struct {
	KV   KeyKV
	Name string
	// Runs is the ledger's KV (its Run and Load), read for the run claimants whose grant is live:
	// a sequence's slots run one after another under one grant, and a key the run of an earlier
	// slot left pending is unknown to a later one. Nil: run claimants are judged by their grant.
	Runs RunKV
	// ended holds the runs found over (run → true): an attempt that ended never runs again, so
	// they are not read twice (a claim of many batches reads each batch's old keys). At most
	// maxEnded are kept, so a long-lived client (once serve) does not grow without bound.
	ended  sync.Map
	nEnded atomic.Int64
}

// maxEnded bounds Keys.ended.
const maxEnded = 4096

// RunKV is what Keys reads of the ledger to tell whether a run ended: KV's Run and Load.
type RunKV interface {
	Run(ctx context.Context, runID string) (task, slot string, err error)
	Load(ctx context.Context, task, slot string) (*Doc, Version, time.Time, error)
}

var _ store.Keys = (*Keys)(nil)

// claimParallel is how many Create calls of one Claim run at once.
const claimParallel = 4

// applyRounds bounds the read-decide-write rounds lost to concurrent writers.
const applyRounds = 16

func (k *Keys) errf(format string, a ...any) error {
	return fmt.Errorf(k.Name+": "+format, a...)
}

func (k *Keys) checkScope(scope string) error {
	if err := store.CheckScope(scope); err != nil {
		return k.errf("%w", err)
	}
	return nil
}

func (k *Keys) checkClaimant(c store.Claimant) error {
	if err := c.Check(); err != nil {
		return k.errf("%w", err)
	}
	return nil
}

func ttlMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Microseconds(), 1)
}

// chunks splits keys into consecutive pieces of at most n.
func chunks(keys []string, n int) [][]string {
	var out [][]string
	for lo := 0; lo < len(keys); lo += n {
		out = append(out, keys[lo:min(lo+n, len(keys))])
	}
	return out
}

// get reads the records of keys (any number), batch by batch.
func (k *Keys) get(ctx context.Context, scope string, keys []string) (map[string]StoredKey, error) {
	out := map[string]StoredKey{}
	for _, c := range chunks(keys, k.KV.Batch()) {
		m, err := k.KV.Get(ctx, scope, c)
		if err != nil {
			return nil, err
		}
		for key, v := range m {
			out[key] = v
		}
	}
	return out, nil
}

// Claim claims req.Keys (store.Keys): one Create per batch of sorted unique keys. Fingerprints are
// checked (store.CheckFingerprint) against the records read before the writes and, for keys another claimer created in
// between, after them: a mismatch then deletes the records this call created (tagged with its
// nonce) before failing with ErrFingerprint, so a failed request claims nothing.
func (k *Keys) Claim(ctx context.Context, req store.ClaimRequest) ([]bool, error) {
	tmpl, err := k.checkClaim(req)
	if err != nil {
		return nil, err
	}
	uniq, first, err := req.Distinct()
	if err != nil {
		return nil, err
	}
	slices.Sort(uniq)
	fp := func(key string) string { return req.Fingerprint(first[key]) }
	checkFP := func(recs map[string]StoredKey) error {
		for key, r := range recs {
			if err := store.CheckFingerprint(req.Scope, key, r.Rec.FP, fp(key)); err != nil {
				return err
			}
		}
		return nil
	}
	if req.Fingerprints != nil {
		old, err := k.get(ctx, req.Scope, uniq)
		if err != nil {
			return nil, err
		}
		if err := checkFP(old); err != nil {
			return nil, err
		}
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	tmpl.Nonce = hex.EncodeToString(nb[:])
	claimed, created, lost, err := k.create(ctx, req.Scope, uniq, tmpl, fp)
	if err != nil {
		// Best effort: a failed Claim should claim nothing. A batch that failed half way (ZooKeeper's
		// per-key fallback, a lost connection) may still leave keys claimed that nobody reports.
		if len(created) > 0 {
			_ = k.undo(context.WithoutCancel(ctx), req.Scope, created, tmpl.Nonce)
		}
		return nil, err
	}
	if req.Fingerprints != nil && len(lost) > 0 {
		old, err := k.get(ctx, req.Scope, lost)
		if err != nil {
			return nil, err
		}
		if fpErr := checkFP(old); fpErr != nil {
			if err := k.undo(ctx, req.Scope, created, tmpl.Nonce); err != nil {
				return nil, fmt.Errorf("%w (and the keys this claim created were not all deleted: %v)", fpErr, err)
			}
			return nil, fpErr
		}
	}
	out := make([]bool, len(req.Keys))
	for i, key := range req.Keys {
		out[i] = claimed[key] && first[key] == i
	}
	return out, nil
}

// checkClaim checks req before anything is read and returns the record its keys are created with
// (without fingerprint and nonce).
func (k *Keys) checkClaim(req store.ClaimRequest) (KeyRec, error) {
	if err := req.Check(); err != nil {
		return KeyRec{}, k.errf("%w", err)
	}
	if !req.Pending {
		return KeyRec{State: store.KeyDone}, nil
	}
	c := req.Claimant
	return KeyRec{State: store.KeyPending, Task: c.Task, RunID: c.RunID, Token: c.Token, TTL: ttlMicros(c.Expires)}, nil
}

// create creates the records of the sorted unique keys uniq, batch by batch: claimed and created
// are the keys this call created, lost the keys that existed. Batches go concurrently (at most
// claimParallel at once): on etcd and ZooKeeper a batch is small and each write waits for a
// consensus round, so this is what makes 1,000 keys fast. err joins the batches' errors; the keys
// of the batches that succeeded are reported all the same, for the caller to undo.
func (k *Keys) create(ctx context.Context, scope string, uniq []string, tmpl KeyRec, fp func(string) string) (claimed map[string]bool, created, lost []string, err error) {
	cs := chunks(uniq, k.KV.Batch())
	results := make([][]bool, len(cs))
	errs := make([]error, len(cs))
	sem := make(chan struct{}, claimParallel)
	var wg sync.WaitGroup
	for n, c := range cs {
		recs := make([]KeyRec, len(c))
		for i, key := range c {
			recs[i] = tmpl
			recs[i].FP = fp(key)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[n], errs[n] = k.KV.Create(ctx, scope, c, recs)
		})
	}
	wg.Wait()
	claimed = make(map[string]bool, len(uniq))
	for n, c := range cs {
		for i, ok := range results[n] {
			if ok {
				claimed[c[i]] = true
				created = append(created, c[i])
			} else {
				lost = append(lost, c[i])
			}
		}
	}
	return claimed, created, lost, errors.Join(errs...)
}

// undo deletes the records of keys still carrying nonce.
func (k *Keys) undo(ctx context.Context, scope string, keys []string, nonce string) error {
	_, err := k.apply(ctx, scope, keys, func(_ judge, key string, r KeyRec) (*KeyRec, bool) {
		return nil, r.Nonce == nonce
	}, false)
	return err
}

// apply runs read → decide → Apply over keys, batch by batch, until each batch applies. decide
// returns the new record (nil: delete) and whether to change the key at all. It returns the changed
// keys, with an error too: the batches before it stay changed.
func (k *Keys) apply(ctx context.Context, scope string, keys []string, decide func(j judge, key string, r KeyRec) (*KeyRec, bool), needJudge bool) (map[string]bool, error) {
	changed := map[string]bool{}
	for _, c := range chunks(store.Distinct(keys), k.KV.Batch()) {
		for round := 0; ; round++ {
			if round == applyRounds {
				return changed, fmt.Errorf("%w: %s: keys in scope %q kept changing under %d attempts to update them; retry", store.ErrConflict, k.Name, scope, applyRounds)
			}
			recs, err := k.KV.Get(ctx, scope, c)
			if err != nil {
				return changed, err
			}
			var j judge
			if needJudge {
				if j, err = k.judge(ctx, recs, true); err != nil {
					return changed, err
				}
			}
			var ch []KeyChange
			for _, key := range c {
				r, ok := recs[key]
				if !ok {
					continue
				}
				if nr, do := decide(j, key, r.Rec); do {
					ch = append(ch, KeyChange{Key: key, Ver: r.Ver, Rec: nr})
				}
			}
			if len(ch) == 0 {
				break
			}
			ok, err := k.KV.Apply(ctx, scope, ch)
			if err != nil {
				return changed, err
			}
			if ok {
				for _, x := range ch {
					changed[x.Key] = true
				}
				break
			}
		}
	}
	return changed, nil
}

// Complete marks keys pending under runID done with result (store.Keys). Keys already done under
// runID are accepted again; any other key is ErrConflict and nothing changes. Batches of Batch()
// keys are each all-or-none; a call with more keys may complete some batches before failing.
func (k *Keys) Complete(ctx context.Context, scope string, keys []string, runID string, result []byte) error {
	if err := k.checkScope(scope); err != nil {
		return err
	}
	if runID == "" {
		return k.errf("complete needs a run id")
	}
	if err := store.CheckKeyResult(result); err != nil {
		return k.errf("%w", err)
	}
	// Each record carries the result: a large one goes a key per write, under the stores' request
	// and node limits.
	n := k.KV.Batch()
	if len(result) > 4<<10 {
		n = 1
	}
	for _, c := range chunks(store.Distinct(keys), n) {
		for round := 0; ; round++ {
			if round == applyRounds {
				return fmt.Errorf("%w: %s: keys in scope %q kept changing; retry", store.ErrConflict, k.Name, scope)
			}
			recs, err := k.KV.Get(ctx, scope, c)
			if err != nil {
				return err
			}
			bad := 0
			var ch []KeyChange
			var now int64
			for _, key := range c {
				r, ok := recs[key]
				if !ok || r.Rec.RunID != runID {
					bad++
					continue
				}
				if r.Rec.State == store.KeyPending {
					if now == 0 {
						t, err := k.KV.Now(ctx)
						if err != nil {
							return err
						}
						now = t.UnixMicro()
					}
					nr := r.Rec
					nr.State, nr.Done, nr.Result, nr.TTL = store.KeyDone, now, result, 0
					ch = append(ch, KeyChange{Key: key, Ver: r.Ver, Rec: &nr})
				}
			}
			if bad > 0 {
				return fmt.Errorf("%w: %d of %d keys in scope %q are not claimed by run %s (never claimed, forgotten, or reclaimed by another)",
					store.ErrConflict, bad, len(c), scope, runID)
			}
			if len(ch) == 0 {
				break
			}
			ok, err := k.KV.Apply(ctx, scope, ch)
			if err != nil {
				return err
			}
			if ok {
				break
			}
		}
	}
	return nil
}

// Lookup returns the stored keys among keys (store.Keys), in input order without repeats; pending
// keys whose claimant is gone are reported KeyUnknown.
func (k *Keys) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if err := k.checkScope(scope); err != nil {
		return nil, err
	}
	u := store.Distinct(keys)
	recs, err := k.get(ctx, scope, u)
	if err != nil {
		return nil, err
	}
	j, err := k.judge(ctx, recs, false)
	if err != nil {
		return nil, err
	}
	out := make([]store.Key, 0, len(recs))
	for _, key := range u {
		if r, ok := recs[key]; ok {
			out = append(out, j.key(scope, key, r.Rec))
		}
	}
	return out, nil
}

// key is the stored key as store.Keys reports it: KeyUnknown when its claimant is gone.
func (j judge) key(scope, key string, r KeyRec) store.Key {
	x := store.Key{Scope: scope, Key: key, State: r.State, Fingerprint: r.FP, RunID: r.RunID,
		ClaimedAt: time.UnixMicro(r.Claimed).UTC(), Result: r.Result}
	switch {
	case r.Done > 0:
		x.DoneAt = time.UnixMicro(r.Done).UTC()
	case r.State == store.KeyDone: // claimed done at once: done when claimed, as on the SQL stores
		x.DoneAt = x.ClaimedAt
	}
	if j.gone(r) {
		x.State = store.KeyUnknown
	}
	return x
}

var _ store.ScopeLister = (*Keys)(nil)

// Scopes lists the scopes that hold keys (store.ScopeLister), a page of the backend's index.
func (k *Keys) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	return k.KV.Scopes(ctx, cursor, limit)
}

// ScopeKeys lists the keys of scope (store.ScopeLister): a page read from the backend, judged as
// Lookup judges, without results.
func (k *Keys) ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]store.Key, string, error) {
	if err := k.checkScope(scope); err != nil {
		return nil, "", err
	}
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	keys, recs, next, err := k.KV.Page(ctx, scope, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	m := make(map[string]StoredKey, len(keys))
	for i, key := range keys {
		m[key] = StoredKey{Rec: recs[i]}
	}
	j, err := k.judge(ctx, m, false)
	if err != nil {
		return nil, "", err
	}
	out := make([]store.Key, len(keys))
	for i, key := range keys {
		r := recs[i]
		r.Result = nil
		out[i] = j.key(scope, key, r)
	}
	return out, next, nil
}

// Reclaim changes the keys whose claimant is gone (store.Keys): pending under c when c is set, else
// done (asDone) or deleted. It returns the changed keys in input order.
func (k *Keys) Reclaim(ctx context.Context, scope string, keys []string, c *store.Claimant, asDone bool) ([]string, error) {
	if err := k.checkScope(scope); err != nil {
		return nil, err
	}
	if c != nil {
		if asDone {
			return nil, k.errf("reclaim to a claimant needs asDone false")
		}
		if err := k.checkClaimant(*c); err != nil {
			return nil, err
		}
	}
	changed, err := k.apply(ctx, scope, keys, func(j judge, _ string, r KeyRec) (*KeyRec, bool) {
		if !j.gone(r) {
			return nil, false
		}
		now := j.now
		switch {
		case c != nil:
			r.Task, r.RunID, r.Token, r.TTL, r.Claimed = c.Task, c.RunID, c.Token, ttlMicros(c.Expires), now
			return &r, true
		case asDone:
			r.State, r.Done, r.TTL = store.KeyDone, now, 0
			return &r, true
		}
		return nil, true
	}, true)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, key := range store.Distinct(keys) {
		if changed[key] {
			out = append(out, key)
		}
	}
	return out, nil
}
