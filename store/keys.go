package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Business idempotency keys (once keys, once effect, the HTTP middleware), kept by the store.
//
// A key is claimed once per scope, forever unless forgotten. A claim is either final (KeyDone at once)
// or two-phase: KeyPending, owned by a claimant, until Complete marks it done. A pending key whose
// claimant is gone is not handed out again: readers see it as KeyUnknown and a person (or a
// reconciler) decides, through Reclaim.

// KeyState is the state of a claimed key.
type KeyState string

// Key states.
const (
	KeyPending KeyState = "pending" // claimed by a claimant that may still be working on it
	KeyDone    KeyState = "done"    // the work for the key happened
	KeyUnknown KeyState = "unknown" // pending, and its claimant is gone: the outcome is not known
)

// ErrFingerprint is returned (wrapped) when a key is claimed again with a different payload
// fingerprint than the one it was first claimed with (CheckFingerprint).
var ErrFingerprint = errors.New("store: key reused with a different payload")

// CheckFingerprint is the one rule every store applies when a key stored with fingerprint stored is
// claimed again with fingerprint given: ErrFingerprint (wrapped, naming the key) when both are
// non-empty and differ, else nil, and the claim is a duplicate like any other (false).
//
// An empty fingerprint on either side is "payload not recorded", not a payload: a key claimed
// without one (once keys claim, once effect, an older once, a caller that gives none) and claimed
// again with one is a replay of an operation whose payload was never written down, so nothing says
// it differs. Refusing it would not stop a second execution (the claim is false either way) but
// would turn a replay into an error whose advice (the 422 of idemhttp: "use a new key") executes
// the operation again. The rule is symmetric, and the same as package keys' in the user's database.
func CheckFingerprint(scope, key, stored, given string) error {
	if stored == "" || given == "" || stored == given {
		return nil
	}
	return fmt.Errorf("%w: key %q in scope %q was claimed with fingerprint %q, now %q", ErrFingerprint, key, scope, stored, given)
}

// Claimant identifies who claims keys as pending, and how to tell later whether it is gone.
// A claimant is gone when its Expires has passed by the store's clock (HTTP requests, effects
// outside a run) or, for a claimant inside a once run (Task, RunID and Token set), when either
//
//   - the task's lease is no longer live with Token (expired, released, taken over), nor a live
//     seat's: the run's holder is gone; or
//   - the ledger records the attempt of Task with run id RunID, and it is no longer running: the run
//     ended. A sequence (catch-up, backfill, a daemon's catch-up) runs its slots one after another
//     under one lease and one token, each slot a run of its own, so a key left pending by one
//     slot's run is unknown to the next slot's, as it would be to a later run under a new token.
//
// Both only ever turn from live to gone. The second needs the attempt recorded: a RunID that names
// no attempt of Task (a program's own id, an attempt pruned) is judged by its token alone, so a key
// pending under a run still working is never reported gone.
type Claimant struct {
	Task    string
	RunID   string
	Token   int64
	Expires time.Duration // time-to-live of a pending claim from now by the store's clock; 0: none
}

// ClaimRequest claims keys in one scope.
type ClaimRequest struct {
	Scope string   // 1–200 bytes, like a task name
	Keys  []string // valid keys (ValidateKey); duplicates within one request count once
	// Fingerprints, when not nil, has one payload fingerprint per key ("": none); a key already
	// claimed with a different fingerprint fails the whole request with ErrFingerprint, compared
	// only when both are non-empty (CheckFingerprint).
	Fingerprints []string
	// Pending claims the keys two-phase, owned by Claimant; otherwise they are done at once.
	Pending  bool
	Claimant Claimant
}

// Key is a claimed key as stored.
type Key struct {
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	State       KeyState  `json:"state"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	RunID       string    `json:"run_id,omitempty"`
	ClaimedAt   time.Time `json:"claimed_at"`
	DoneAt      time.Time `json:"done_at,omitzero"`
	// Result is an opaque value stored by Complete (e.g. a replayable HTTP response).
	Result []byte `json:"-"`
}

// Keys is implemented by stores that keep business idempotency keys.
//
// Contract:
//   - Claim returns, in input order, true for each key this call claimed (it was never claimed in the
//     scope) and false for keys claimed before (by anyone, in any state). Concurrent claimers never both
//     get true for one key. A batch is one round trip (one statement or script) where the store allows.
//   - Complete moves pending keys claimed by runID to done, storing result (may be nil); ErrConflict for
//     keys not pending under runID. A result over MaxKeyResult is ErrInvalid, and nothing changes.
//   - Lookup returns the stored keys (missing keys are absent), pending ones reported KeyUnknown when
//     their claimant is gone.
//   - Reclaim hands pending keys whose claimant is gone (KeyUnknown) to a new claimant: as pending again
//     when c is set, or deletes them (asDone false, c zero) or marks them done (asDone true). It returns
//     the keys it changed. Keys still pending under a live claimant are left alone.
//   - Forget deletes keys of the scope claimed before `before`: done keys, and pending keys whose
//     claimant is gone (KeyUnknown: their work may have happened), only when includeDone; other
//     pending keys only when their claimant cannot be told (no token and no expiry). A key pending
//     under a live claimant is never forgotten, however old: its work may be happening now, and a
//     forgotten key can be claimed again (the work would be done twice). Where the store can, it
//     deletes in batches of ForgetBatch keys by claim time, each its own short transaction, so that
//     runs writing meanwhile wait a batch at most: an error then returns the number of keys forgotten
//     before it with it (they stay forgotten).
//   - ReleaseKeys deletes keys still pending under runID (the claimant's work did not happen: a
//     failed effect call, a panicking HTTP handler), so they can be claimed again. Keys not pending
//     under runID (done, another claimant's, missing) are left alone without error. It is named
//     ReleaseKeys, not Release, because stores implement store.Leaser's Release too.
type Keys interface {
	Claim(ctx context.Context, req ClaimRequest) ([]bool, error)
	Complete(ctx context.Context, scope string, keys []string, runID string, result []byte) error
	Lookup(ctx context.Context, scope string, keys []string) ([]Key, error)
	Reclaim(ctx context.Context, scope string, keys []string, c *Claimant, asDone bool) ([]string, error)
	Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error)
	ReleaseKeys(ctx context.Context, scope string, keys []string, runID string) error
}

// Helpers for backends implementing Keys.

// Distinct returns keys without repeats, in first-occurrence order.
func Distinct(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

// Distinct returns the request's keys without repeats, in first-occurrence order, and the index in
// r.Keys of each key's first occurrence. A key repeated with two non-empty fingerprints that differ
// is ErrFingerprint (CheckFingerprint's rule: an empty one differs from none), wherever they are:
// each is compared with the key's first non-empty one, not with its first occurrence's, which may be
// empty. The key is claimed with the fingerprint of its first occurrence.
func (r ClaimRequest) Distinct() (keys []string, first map[string]int, err error) {
	first = make(map[string]int, len(r.Keys))
	keys = make([]string, 0, len(r.Keys))
	var printed map[string]string // each key's first non-empty fingerprint
	if r.Fingerprints != nil {
		printed = make(map[string]string, len(r.Keys))
	}
	for i, k := range r.Keys {
		if _, ok := first[k]; !ok {
			first[k] = i
			keys = append(keys, k)
		}
		if r.Fingerprints == nil {
			continue
		}
		if CheckFingerprint(r.Scope, k, printed[k], r.Fingerprints[i]) != nil {
			return nil, nil, fmt.Errorf("%w: key %q appears twice in one claim with different fingerprints", ErrFingerprint, k)
		}
		if printed[k] == "" {
			printed[k] = r.Fingerprints[i]
		}
	}
	return keys, first, nil
}

// Fingerprint returns the fingerprint of r.Keys[i], "" when the request carries none.
func (r ClaimRequest) Fingerprint(i int) string {
	if r.Fingerprints == nil {
		return ""
	}
	return r.Fingerprints[i]
}

// ForgetBatch is how many of a scope's keys one transaction of a batched Forget looks at (the
// keys claimed at the batch's last instant too, so that a batch ends between two claim times).
// Deleting a million keys in one transaction held SQLite's write lock for 5.7 s, and each `once run`
// on the host waited that long.
const ForgetBatch = 5000

// ForgetFrom is where a batched Forget starts: before any claim time a store holds.
var ForgetFrom = time.Unix(0, 0).UTC().AddDate(-100, 0, 0)
