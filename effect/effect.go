// Package effect calls a downstream operation (a payment, an e-mail, a POST to a partner) at most
// once per key, across retries, re-runs and crashes, on any store that implements store.Keys.
//
// Do claims the key as pending under a claimant, makes the call, and marks the key done. The states:
//
//   - new: Do claims it, calls, and marks it done (Called). A call that returns an error is taken as
//     not applied: the claim is released (store.Keys.ReleaseKeys), so a retry calls again; unless
//     the error wraps ErrMaybeApplied (the call was cut short: killed, its status lost), is a
//     timeout (context.DeadlineExceeded or a net.Error timeout, whichever context or client set it),
//     or is context.Canceled after ctx ended, when the key stays pending and turns unknown once its
//     claimant is gone (Interrupted).
//   - done: Do returns AlreadyDone without calling.
//   - pending under a live claimant: another attempt is calling now; ErrInFlight.
//   - unknown (pending, and its claimant died mid-call): nobody knows whether the call happened.
//     Do never repeats it blindly: the Reconciler asks the downstream system. Happened → the key is
//     marked done without calling (Reconciled); did not happen → Do takes the key over and calls.
//     Without a Reconciler, or when it cannot tell, Do returns ErrUnknown and a person decides.
package effect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

// Outcome is what Do did.
type Outcome string

// Outcomes.
const (
	Called      Outcome = "called"     // the call ran and returned nil; the key is done
	Failed      Outcome = "failed"     // the call ran and returned an error; the claim was released
	AlreadyDone Outcome = "done"       // the key was done before; no call
	Reconciled  Outcome = "reconciled" // an earlier attempt's call happened (per the Reconciler); marked done, no call
	// Interrupted: the call was cut short (its error wraps ErrMaybeApplied) and may have happened; the
	// key stays pending and turns unknown when its claimant is gone, so it is never called blindly.
	Interrupted Outcome = "interrupted"
)

var (
	// ErrUnknown: an earlier attempt died during the call and whether it happened is not known.
	ErrUnknown = errors.New("effect: an earlier attempt died during the call and its outcome is unknown")
	// ErrInFlight: another attempt holds the key and is calling now.
	ErrInFlight = errors.New("effect: another attempt is making this call now")
	// ErrMaybeApplied, wrapped by a call's error, says the call may have happened although it did not
	// return success: it was killed mid-call (a signal, the OOM killer) or how it ended is not known.
	// Do then keeps the claim (Interrupted) instead of releasing it for a retry to call again.
	ErrMaybeApplied = errors.New("effect: the call was cut short and may have happened")
)

// Reconciler tells whether the effect for a key happened downstream, for a key whose earlier
// attempt died mid-call. An error means it cannot tell: the key is held for review (ErrUnknown).
type Reconciler interface {
	Happened(ctx context.Context, scope, key string) (bool, error)
}

// ReconcilerFunc adapts a function to Reconciler.
type ReconcilerFunc func(ctx context.Context, scope, key string) (bool, error)

// Happened calls f.
func (f ReconcilerFunc) Happened(ctx context.Context, scope, key string) (bool, error) {
	return f(ctx, scope, key)
}

// Do calls call at most once for (scope, key), as claimant c (c.RunID set; a run's Task and Token, or
// an Expires TTL that must outlast the call: a claimant with neither, or a nil call, is refused with
// an error wrapping store.ErrInvalid, before the key is claimed). With a run's Task and Token, c.RunID is that run's own (run.RunID),
// each slot's in a sequence: a claim under the id of an earlier run of the task reads gone (unknown
// to others) as soon as that run's attempt ended, while the call may still be in flight. It returns the outcome and, for Failed, call's error unchanged
// (Interrupted, with the claim kept, when it wraps ErrMaybeApplied, is a timeout, or is
// context.Canceled after ctx ended: a call cut short mid-flight may have been applied); ErrUnknown,
// ErrInFlight and store errors are wrapped. A call that succeeds is recorded as done even when ctx
// ends meanwhile (within 10 s). If the key cannot be marked done, Do returns Called with the store
// error: the key stays pending and becomes unknown, so the call is not repeated blindly.
func Do(ctx context.Context, s store.Keys, scope, key string, c store.Claimant, call func(ctx context.Context) error, rec Reconciler) (Outcome, error) {
	if err := checkClaimant(c); err != nil {
		return "", err
	}
	if call == nil {
		// Refused before the claim: called after it, a nil call panicked and left the key pending.
		return "", fmt.Errorf("%w: effect: no call: give a non-nil call", store.ErrInvalid)
	}
	for range 4 { // rounds lost to a concurrent Reclaim or Forget
		got, err := s.Claim(ctx, store.ClaimRequest{Scope: scope, Keys: []string{key}, Pending: true, Claimant: c})
		if err != nil {
			return "", err
		}
		if got[0] {
			return callAndRecord(ctx, s, scope, key, c, call)
		}
		ks, err := s.Lookup(ctx, scope, []string{key})
		if err != nil {
			return "", err
		}
		if len(ks) == 0 {
			continue // forgotten in between: claim again
		}
		switch k := ks[0]; k.State {
		case store.KeyDone:
			return AlreadyDone, nil
		case store.KeyPending:
			return "", fmt.Errorf("%w: key %q in scope %q is held by run %s", ErrInFlight, key, scope, k.RunID)
		}
		if rec == nil {
			return "", fmt.Errorf("%w: key %q in scope %q (left pending by run %s)", ErrUnknown, key, scope, ks[0].RunID)
		}
		happened, err := rec.Happened(ctx, scope, key)
		if err != nil {
			return "", fmt.Errorf("%w: key %q in scope %q: the reconciler cannot tell: %v", ErrUnknown, key, scope, err)
		}
		if happened {
			ch, err := s.Reclaim(ctx, scope, []string{key}, nil, true)
			if err != nil {
				return "", err
			}
			if len(ch) == 1 {
				return Reconciled, nil
			}
			continue
		}
		ch, err := s.Reclaim(ctx, scope, []string{key}, &c, false)
		if err != nil {
			return "", err
		}
		if len(ch) == 1 {
			return callAndRecord(ctx, s, scope, key, c, call)
		}
	}
	return "", fmt.Errorf("%w: key %q in scope %q changed hands repeatedly; retry", ErrInFlight, key, scope)
}

// cutShort reports whether a call's error leaves open whether it happened: the call says so
// (ErrMaybeApplied), it timed out (its own timeout too: http.Client.Timeout on a POST that was
// sent), or it ended with its context (a POST cancelled after it was sent may have been applied
// downstream).
func cutShort(ctx context.Context, err error) bool {
	var to interface{ Timeout() bool }
	switch {
	case errors.Is(err, ErrMaybeApplied), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &to) && to.Timeout():
		return true
	}
	return ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// checkClaimant refuses a claimant whose claim could never be told gone: without a run's task and
// token, nor an expiry, a claimant that died mid-call would hold its key pending for ever, and every
// later Do would answer ErrInFlight (someone is calling now) instead of ErrUnknown.
func checkClaimant(c store.Claimant) error {
	switch {
	case c.RunID == "":
		return fmt.Errorf("%w: effect: the claimant needs a run id", store.ErrInvalid)
	case c.Expires < 0, c.Token < 0:
		return fmt.Errorf("%w: effect: the claimant's Expires and Token must not be negative", store.ErrInvalid)
	case c.Expires == 0 && (c.Task == "" || c.Token == 0):
		return fmt.Errorf("%w: effect: the claimant needs a run's Task and Token (run.Task, run.Token) or an Expires "+
			"that outlasts the call: without either, a claimant that died mid-call would hold the key for ever", store.ErrInvalid)
	}
	return nil
}

func callAndRecord(ctx context.Context, s store.Keys, scope, key string, c store.Claimant, call func(ctx context.Context) error) (Outcome, error) {
	if err := call(ctx); err != nil {
		if cutShort(ctx, err) {
			return Interrupted, err // the claim stays: unknown once its claimant is gone
		}
		// The call failed, so it did not apply (the caller's contract): release the claim even when
		// ctx is done, so a retry can call again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := s.ReleaseKeys(rctx, scope, []string{key}, c.RunID); rerr != nil {
			return Failed, fmt.Errorf("%w (and the claim on key %q was not released: %v)", err, key, rerr)
		}
		return Failed, err
	}
	// Recorded even when ctx ended during the call: it succeeded, and a key left pending would need
	// a person to reconcile it.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.Complete(dctx, scope, []string{key}, c.RunID, nil); err != nil {
		return Called, fmt.Errorf("effect: the call for key %q succeeded but was not recorded as done (it will be reported unknown): %w", key, err)
	}
	return Called, nil
}
