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
// lists the scope, so its cost grows with the scope's size.
func (k *Keys) Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error) {
	if err := k.checkScope(scope); err != nil {
		return 0, err
	}
	all, err := k.KV.List(ctx, scope)
	if err != nil {
		return 0, err
	}
	b := before.UnixMicro()
	var keys []string
	for key, r := range all {
		if r.Rec.Claimed < b && (includeDone || r.Rec.State != store.KeyDone) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	changed, err := k.apply(ctx, scope, keys, func(j judge, _ string, r KeyRec) (*KeyRec, bool) {
		return nil, r.Claimed < b && j.forgettable(r, includeDone)
	}, true)
	return int64(len(changed)), err
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
