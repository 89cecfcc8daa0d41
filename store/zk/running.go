package zk

import (
	"context"
	"errors"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
)

// The running index (kvstore.RunningKV): one flat directory, /once/P/a, with a node per slot whose
// document has a running attempt, task and slot joined by "|" (which esc never leaves unescaped),
// kept by Save's multi as the waiting index is. Abandon lists it instead of the task's documents.
// /once/P/a-indexed says it was built: a prefix an older once wrote gets it on its first Abandon.

var _ kvstore.RunningKV = kv{}

func (s *Store) runningPath(task, slot string) string {
	return s.p + "/a/" + esc(task) + "|" + esc(slot)
}
func (s *Store) runningIndexed() string { return s.p + "/a-indexed" }

// runningOp is the multi op that makes (task, slot)'s running node exist (runs) or not, or nil
// when it already does. A concurrent change of the node fails the multi, and the write is retried.
func (s *Store) runningOp(ctx context.Context, task, slot string, runs bool) (any, error) {
	path := s.runningPath(task, slot)
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(path); return ok, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	switch {
	case runs && !ok:
		if err := s.ensureRunsDir(ctx); err != nil {
			return nil, err
		}
		return &zk.CreateRequest{Path: path, Acl: s.acl}, nil
	case !runs && ok:
		return &zk.DeleteRequest{Path: path, Version: -1}, nil
	}
	return nil, nil
}

// ensureRunsDir creates the running index's directory, once per store.
func (s *Store) ensureRunsDir(ctx context.Context) error {
	s.mu.Lock()
	known := s.runsDir
	s.mu.Unlock()
	if known {
		return nil
	}
	if err := s.ensure(ctx, s.p+"/a"); err != nil {
		return err
	}
	s.mu.Lock()
	s.runsDir = true
	s.mu.Unlock()
	return nil
}

// Running lists the running index (its mark and the directory, read together) and reads the
// documents of task's entries.
func (k kv) Running(ctx context.Context, task string) ([]*kvstore.Doc, bool, error) {
	s := k.s
	type listing struct {
		marked bool
		kids   []string
		err    error
	}
	got, err := call(ctx, s, func() (listing, error) {
		// Both requests are in flight at once: one round trip.
		mark := make(chan listing, 1)
		go func() {
			ok, _, err := s.c.Exists(s.runningIndexed())
			mark <- listing{marked: ok, err: err}
		}()
		kids, _, err := s.c.Children(s.p + "/a")
		if errors.Is(err, zk.ErrNoNode) {
			kids, err = nil, nil
		}
		m := <-mark
		return listing{marked: m.marked, kids: kids}, errors.Join(m.err, err)
	})
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvstore.Doc
	pre := esc(task) + "|"
	for _, name := range got.kids {
		sl, ok := strings.CutPrefix(name, pre)
		if !ok {
			continue
		}
		slot := unesc(sl)
		b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.docPath(task, slot)); return b, err })
		if errors.Is(err, zk.ErrNoNode) {
			// Listed, but gone (an older once's prune): an empty document takes the entry out.
			d := &kvstore.Doc{Task: task, Slot: slot}
			out = append(out, d)
			continue
		}
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		d, err := kvstore.Unmarshal(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, got.marked, nil
}

// IndexRunning creates the running nodes of docs with a running attempt and, when the index is not
// built yet, those of every document of the prefix (once: a prefix an older once wrote), then the
// mark.
func (k kv) IndexRunning(ctx context.Context, task string, docs []*kvstore.Doc) error {
	s := k.s
	marked, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(s.runningIndexed()); return ok, err })
	if err != nil {
		return s.mapErr(err)
	}
	if !marked {
		if docs, err = k.Docs(ctx, ""); err != nil {
			return err
		}
	}
	if err := s.ensureRunsDir(ctx); err != nil {
		return err
	}
	for _, d := range docs {
		if d.Runs() {
			if err := s.ensure(ctx, s.runningPath(d.Task, d.Slot)); err != nil {
				return err
			}
		}
	}
	return s.ensure(ctx, s.runningIndexed())
}
