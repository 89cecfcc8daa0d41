package web

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

// The overview's last successes, kept per server: a task whose newest entries hold no success
// costs one more read (store.ReadLastSuccess: up to store.SuccessScan attempts, 6–15 ms on
// PostgreSQL or MariaDB), and during an incident every failing row paid it on every reload.
//
// A result is kept under a key of what the row read of the task just before: the cursor and state
// of each of its newest entries. A success is only ever made by Finish of a running attempt, fenced
// by the task's latest lease token; so a success since the result was read is either a new entry
// (an attempt that began since: among the newest, the key changes) or the end of an attempt that
// was running then: one among the newest changes its state (and the row finds the success there
// without this read); one older than those held a live lease or was listed as running with its
// holder gone. A row whose task holds a lease or has an attempt gone, or read while the attempts
// running could not all be listed, neither uses nor keeps a result. Events, a person's resolve
// (which makes no success) and Abandon change the newest entries or leave the last success as it
// is. Prune may remove old entries unseen: a kept "not known" may then stay where a new read would
// say "never", or a success pruned since stay shown, until the task's history moves or the result
// is successKeep old (then it is read again).

// maxCachedSuccess bounds the tasks kept: past it the whole cache is cleared (a page shows at most
// maxTasks rows; a fleet paged through costs one read per row again, as without the cache).
const maxCachedSuccess = 4 * maxTasks

// successKeep bounds how long a result is kept while the key stays: what the key cannot see (a
// prune, a store restored from a backup) shows after at most this.
const successKeep = 5 * time.Minute

// successCache is a task's last success by the key of its newest entries; safe for concurrent
// requests. Two requests missing at once both read: the last to finish is kept.
type successCache struct {
	mu sync.Mutex
	m  map[string]cachedSuccess
	// read is store.ReadLastSuccess; a test counts the reads through it.
	read func(ctx context.Context, l store.Ledger, task string) (store.LastSuccess, error)
}

type cachedSuccess struct {
	key     [sha256.Size]byte
	read    time.Time // when it was read (successKeep)
	ended   time.Time // zero: no success found
	unknown bool
	looked  int
}

// successKey is the key of a task's newest entries es, newest first; false when there is none (no
// history: nothing to read) or the store gives an entry no cursor (no key: no cache).
func successKey(es []store.Entry) ([sha256.Size]byte, bool) {
	h := sha256.New()
	for _, e := range es {
		if e.Cursor == "" {
			return [sha256.Size]byte{}, false
		}
		h.Write([]byte(e.Cursor))
		h.Write([]byte{0})
		h.Write([]byte(e.State))
		h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k, len(es) > 0
}

// lastSuccess is task's store.LastSuccess: kept when key (successKey of the entries the row just
// read) is the key it was read under, else read and kept. With cache false it is read and not kept.
func (c *successCache) lastSuccess(ctx context.Context, l store.Ledger, task string, es []store.Entry, cache bool) (store.LastSuccess, error) {
	key, ok := successKey(es)
	cache = cache && ok
	if cache {
		c.mu.Lock()
		got, hit := c.m[task]
		c.mu.Unlock()
		if hit && got.key == key && time.Since(got.read) < successKeep {
			return got.lastSuccess(), nil
		}
	}
	start := time.Now()
	ls, err := c.read(ctx, l, task)
	if err != nil || !cache {
		return ls, err
	}
	v := cachedSuccess{key: key, read: start, unknown: ls.Unknown, looked: ls.Looked}
	if ls.Attempt != nil && ls.Attempt.EndedAt != nil {
		v.ended = *ls.Attempt.EndedAt
	}
	c.mu.Lock()
	if _, there := c.m[task]; !there && len(c.m) >= maxCachedSuccess {
		clear(c.m)
	}
	c.m[task] = v
	c.mu.Unlock()
	return ls, nil
}

// lastSuccess is what a row shows of v: a fresh attempt holding only EndedAt (all rows use).
func (v cachedSuccess) lastSuccess() store.LastSuccess {
	ls := store.LastSuccess{Unknown: v.unknown, Looked: v.looked}
	if !v.ended.IsZero() {
		at := v.ended
		ls.Attempt = &store.Attempt{EndedAt: &at}
	}
	return ls
}
