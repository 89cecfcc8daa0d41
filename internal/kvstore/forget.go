package kvstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/once-run/once/store"
)

// KeyNamesKV is a KeyKV capability for Forget: the names of a scope's keys, read whole, for a
// backend whose Page costs a read of the whole scope anyway. ZooKeeper lists a node's children
// whole; an etcd range with a limit still counts every key to the range's end (etcd-io/etcd#11057):
// paging 500,000 keys 5,000 at a time took 1.2 s for the first page and 22 s in all, and a forget
// by pages 67 s where listing took 42 s. Forget then reads the records a batch at a time.
type KeyNamesKV interface {
	// Names returns the names of scope's keys, in no particular order.
	Names(ctx context.Context, scope string) ([]string, error)
}

// Forget deletes the scope's keys claimed before before (store.Keys): done keys only when
// includeDone, pending ones only when their claimant is gone or cannot be told (forgettable). It
// deletes store.ForgetBatch keys at a time, each batch before reading the next, so that it never
// holds the scope's records: listing a scope of 500,000 keys whole took 439 MB on Redis, 451 MB on
// etcd. A backend with KeyNamesKV gives the scope's names, and the records are read a batch at a
// time; any other is walked with Page. An error returns the keys forgotten before it with it (they
// stay forgotten).
func (k *Keys) Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error) {
	if err := k.checkScope(scope); err != nil {
		return 0, err
	}
	b := before.UnixMicro()
	forget := func(keys []string) (int64, error) {
		// apply reads each key again with its version and decides on that record.
		changed, err := k.apply(ctx, scope, keys, func(j judge, _ string, r KeyRec) (*KeyRec, bool) {
			return nil, r.Claimed < b && j.forgettable(r, includeDone)
		}, true)
		return int64(len(changed)), err
	}
	if nk, ok := k.KV.(KeyNamesKV); ok {
		names, err := nk.Names(ctx, scope)
		if err != nil {
			return 0, err
		}
		var n int64
		for _, c := range chunks(names, store.ForgetBatch) {
			m, err := forget(c)
			if n += m; err != nil {
				return n, err
			}
		}
		return n, nil
	}
	return k.forgetPages(ctx, scope, func(r KeyRec) bool {
		return r.Claimed < b && (includeDone || r.State != store.KeyDone)
	}, forget)
}

// forgetPages walks scope with Page, store.ForgetBatch keys at a time, and hands forget each
// page's keys that may be forgotten (maybe) before reading the next. A key a page shows twice
// (Redis' HSCAN while the hash changes) is forgotten once: the second time it is gone.
func (k *Keys) forgetPages(ctx context.Context, scope string, maybe func(KeyRec) bool, forget func([]string) (int64, error)) (int64, error) {
	var n int64
	for cursor := ""; ; {
		keys, recs, next, err := k.KV.Page(ctx, scope, cursor, store.ForgetBatch)
		if err != nil {
			return n, err
		}
		var cands []string
		for i, key := range keys {
			if maybe(recs[i]) {
				cands = append(cands, key)
			}
		}
		slices.Sort(cands)
		m, err := forget(cands)
		if n += m; err != nil || next == "" {
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
