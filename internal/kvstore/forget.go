package kvstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/once-run/once/store"
)

// Forget deletes the scope's keys claimed before before (store.Keys): done keys only when
// includeDone, pending ones only when their claimant is gone or cannot be told (forgettable). It
// walks the scope a page of store.ForgetBatch keys at a time (KeyKV.Page), deleting each page's
// forgettable keys before reading the next, so its memory stays flat in the scope's size: listing
// a scope of 500,000 keys whole on Redis took 439 MB. A key a page shows twice (Redis' HSCAN while
// the hash changes) is deleted once: the second time it is gone. An error returns the keys
// forgotten before it with it (they stay forgotten).
func (k *Keys) Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error) {
	if err := k.checkScope(scope); err != nil {
		return 0, err
	}
	b := before.UnixMicro()
	var n int64
	for cursor := ""; ; {
		keys, recs, next, err := k.KV.Page(ctx, scope, cursor, store.ForgetBatch)
		if err != nil {
			return n, err
		}
		var cands []string
		for i, key := range keys {
			if r := recs[i]; r.Claimed < b && (includeDone || r.State != store.KeyDone) {
				cands = append(cands, key)
			}
		}
		slices.Sort(cands)
		// apply reads each candidate again with its version and decides on that record.
		changed, err := k.apply(ctx, scope, cands, func(j judge, _ string, r KeyRec) (*KeyRec, bool) {
			return nil, r.Claimed < b && j.forgettable(r, includeDone)
		}, true)
		n += int64(len(changed))
		if err != nil || next == "" {
			return n, err
		}
		cursor = next
	}
}

// forgettable is store.Keys' Forget rule for a key claimed before the cutoff: a done key, or a
// pending one whose claimant is gone (unknown: its work may have happened), with includeDone; a
// pending one whose claimant has neither token nor expiry to tell by.
func (j judge) forgettable(r KeyRec, includeDone bool) bool {
	if r.State == store.KeyDone {
		return includeDone
	}
	return includeDone && j.gone(r) || r.Token <= 0 && r.TTL <= 0
}

// ReleaseKeys deletes keys still pending under runID (store.Keys); others are left alone.
func (k *Keys) ReleaseKeys(ctx context.Context, scope string, keys []string, runID string) error {
	if err := k.checkScope(scope); err != nil {
		return err
	}
	if runID == "" {
		return errors.New(k.Name + ": release needs a run id")
	}
	_, err := k.apply(ctx, scope, keys, func(_ judge, _ string, r KeyRec) (*KeyRec, bool) {
		return nil, r.State == store.KeyPending && r.RunID == runID
	}, false)
	return err
}
