package web

import (
	"context"
	"crypto/sha256"
	"errors"
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
// requests. Requests that miss at once under the same key share one read (the first's: reading);
// under another key (the task's history moved) a request reads on its own, and the last read to
// finish is kept.
type successCache struct {
	mu      sync.Mutex
	m       map[string]cachedSuccess
	reading map[string]*successRead // by task: the read under way that a miss under its key waits for
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

// successRead is a read of a task's last success under way, that requests missing under the same
// key wait for (done closed) rather than read again.
type successRead struct {
	key  [sha256.Size]byte
	done chan struct{}
	v    cachedSuccess
	err  error
}

// lastSuccess is task's store.LastSuccess: kept when key (successKey of the entries the row just
// read) is the key it was read under, else read and kept; a miss while a read under the same key
// is under way waits for it (and reads on its own when that read failed: its request may have
// been cancelled). With cache false it is read and not kept.
func (c *successCache) lastSuccess(ctx context.Context, l store.Ledger, task string, es []store.Entry, cache bool) (store.LastSuccess, error) {
	key, ok := successKey(es)
	if !cache || !ok {
		return c.read(ctx, l, task)
	}
	c.mu.Lock()
	got, hit := c.m[task]
	if hit && got.key == key && time.Since(got.read) < successKeep {
		c.mu.Unlock()
		return got.lastSuccess(), nil
	}
	if r := c.reading[task]; r != nil && r.key == key {
		c.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return store.LastSuccess{}, ctx.Err()
		}
		if r.err == nil {
			return r.v.lastSuccess(), nil
		}
		return c.read(ctx, l, task)
	}
	r := &successRead{key: key, done: make(chan struct{}), err: errUnfinished}
	if c.reading == nil {
		c.reading = map[string]*successRead{}
	}
	c.reading[task] = r
	c.mu.Unlock()
	defer func() { // also when the read panics (a waiter then reads on its own: r.err)
		c.mu.Lock()
		if c.reading[task] == r {
			delete(c.reading, task)
		}
		c.mu.Unlock()
		close(r.done)
	}()
	return c.readAndKeep(ctx, l, task, r)
}

// errUnfinished is a successRead's error until its read returned.
var errUnfinished = errors.New("the read of the last success did not finish")

// readAndKeep reads task's last success for r (under its key) and keeps it.
func (c *successCache) readAndKeep(ctx context.Context, l store.Ledger, task string, r *successRead) (store.LastSuccess, error) {
	start := time.Now()
	ls, err := c.read(ctx, l, task)
	if err != nil {
		r.err = err
		return ls, err
	}
	r.err = nil
	v := cachedSuccess{key: r.key, read: start, unknown: ls.Unknown, looked: ls.Looked}
	if ls.Attempt != nil && ls.Attempt.EndedAt != nil {
		v.ended = *ls.Attempt.EndedAt
	}
	r.v = v
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
