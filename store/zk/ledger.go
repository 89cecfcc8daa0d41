package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvstore.Doc, kvstore.Version, time.Time, error) {
	s := k.s
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(s.docPath(task, slot)); return r{b, st}, err })
	now := time.UnixMilli(time.Now().UnixMilli())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, now, nil
	}
	if err != nil {
		return nil, 0, now, s.mapErr(err)
	}
	d, err := kvstore.Unmarshal(got.b)
	return d, int64(got.st.Version) + 1, now, err
}

func (k kv) Save(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, token int64, run string) (kvstore.Version, error) {
	return k.save(ctx, d, ver, token, run, "")
}

// save is Save that, with release (the path of the exclusive grant's lock node), deletes that node
// in the same multi. A node already gone (the grant expired, or its session ended) is the release
// of an expired grant nobody replaced, which succeeds: the write is made again without it, still
// fenced by the token.
func (k kv) save(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, token int64, run, release string) (kvstore.Version, error) {
	s := k.s
	var ops []any
	if token > 0 {
		f, v, err := s.readFence(ctx, d.Task)
		if err != nil {
			return 0, err
		}
		if !f.current(token) {
			return 0, notCurrent(d.Task, token, f)
		}
		ops = append(ops, &zk.CheckVersionRequest{Path: s.taskPath(d.Task), Version: v})
	}
	path := s.docPath(d.Task, d.Slot)
	if ver == 0 {
		if err := s.ensure(ctx, s.docDir(d.Task)); err != nil {
			return 0, err
		}
		ops = append(ops, &zk.CreateRequest{Path: path, Data: d.Marshal(), Acl: s.acl})
	} else {
		ops = append(ops, &zk.SetDataRequest{Path: path, Data: d.Marshal(), Version: int32(ver - 1)})
	}
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		ops = append(ops, &zk.CreateRequest{Path: s.runPath(run), Data: b, Acl: s.acl})
	}
	// The index of waiting slots and the running index, in the same multi. A slot's node exists
	// when the document as read waited (Waited) or had a running attempt (Ran); only when that
	// changes is it looked at, and created or deleted.
	if _, waits := d.Waits(); waits != d.Waited() {
		op, err := s.waitOp(ctx, d.Task, d.Slot, waits)
		if err != nil {
			return 0, err
		}
		if op != nil {
			ops = append(ops, op)
		}
	}
	if runs := d.Runs(); runs != d.Ran() {
		op, err := s.runningOp(ctx, d.Task, d.Slot, runs)
		if err != nil {
			return 0, err
		}
		if op != nil {
			ops = append(ops, op)
		}
	}
	if release != "" {
		ops = append(ops, &zk.DeleteRequest{Path: release, Version: -1})
	}
	res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if err == nil {
		return ver + 1, nil // the node's version went up by one (a created node's is 0: ver 1)
	}
	if release != "" && len(res) == len(ops) && errors.Is(res[len(res)-1].Error, zk.ErrNoNode) {
		return k.save(ctx, d, ver, token, run, "")
	}
	if token > 0 {
		if f, _, lerr := s.readFence(ctx, d.Task); lerr == nil && !f.current(token) {
			return 0, notCurrent(d.Task, token, f)
		}
	}
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
		return 0, kvstore.ErrStale
	}
	return 0, s.mapErr(err)
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	s := k.s
	b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.runPath(runID)); return b, err })
	if errors.Is(err, zk.ErrNoNode) {
		return "", "", fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
	}
	if err != nil {
		return "", "", s.mapErr(err)
	}
	var ts [2]string
	if err := json.Unmarshal(b, &ts); err != nil {
		return "", "", fmt.Errorf("%w: corrupt run index for %q", store.ErrUnavailable, runID)
	}
	return ts[0], ts[1], nil
}

func (k kv) Grants(ctx context.Context, task string) (kvstore.Grants, error) {
	return k.s.grants(ctx, task)
}

func notCurrent(task string, token int64, f fence) error {
	return fmt.Errorf("%w: token %d is not a current lease token of task %q (latest %d)", store.ErrNotHeld, token, task, f.latest)
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvstore.Doc, error) {
	s := k.s
	children := func(p string) ([]string, error) {
		kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(p); return k, err })
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return kids, s.mapErr(err)
	}
	var dirs []string
	if task != "" {
		dirs = []string{s.docDir(task)}
	} else {
		ts, err := children(s.p + "/d")
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			dirs = append(dirs, s.p+"/d/"+t)
		}
	}
	var out []*kvstore.Doc
	for _, dir := range dirs {
		slots, err := children(dir)
		if err != nil {
			return nil, err
		}
		for _, sl := range slots {
			b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(dir + "/" + sl); return b, err })
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, s.mapErr(err)
			}
			d, err := kvstore.Unmarshal(b)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// waitPath is the slot's node in the index of waiting slots (kvstore.KV.Waiting): one flat
// directory, task and slot joined by "|" (which esc never leaves unescaped).
func (s *Store) waitPath(task, slot string) string { return s.p + "/w/" + esc(task) + "|" + esc(slot) }

// waitOp is the multi op that makes (task, slot)'s index node exist (waits) or not, or nil when
// it already does. A concurrent change of the node fails the multi, and the write is retried.
func (s *Store) waitOp(ctx context.Context, task, slot string, waits bool) (any, error) {
	path := s.waitPath(task, slot)
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(path); return ok, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	switch {
	case waits && !ok:
		if err := s.ensure(ctx, s.p+"/w"); err != nil {
			return nil, err
		}
		return &zk.CreateRequest{Path: path, Acl: s.acl}, nil
	case !waits && ok:
		return &zk.DeleteRequest{Path: path, Version: -1}, nil
	}
	return nil, nil
}

// waitingIndexed marks the index of waiting slots as built (kvstore.KV.Index).
func (s *Store) waitingIndexed() string { return s.p + "/w-indexed" }

// Waiting lists the index of waiting slots (one directory) and reads their documents: it costs
// the slots waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvstore.Doc, bool, error) {
	s := k.s
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(s.waitingIndexed()); return ok, err })
	if err != nil || !ok {
		return nil, false, s.mapErr(err)
	}
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.p + "/w"); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvstore.Doc
	for _, name := range kids {
		t, sl, found := strings.Cut(name, "|")
		if !found {
			continue
		}
		b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.docPath(unesc(t), unesc(sl))); return b, err })
		if errors.Is(err, zk.ErrNoNode) {
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
	return out, true, nil
}

// Index adds the waiting documents to the index and marks it built.
func (k kv) Index(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	if err := s.ensure(ctx, s.p+"/w"); err != nil {
		return err
	}
	for _, d := range docs {
		if _, ok := d.Waits(); ok {
			if err := s.ensure(ctx, s.waitPath(d.Task, d.Slot)); err != nil {
				return err
			}
		}
	}
	return s.ensure(ctx, s.waitingIndexed())
}

// Delete removes the document and its index node when it is still version ver.
func (k kv) Delete(ctx context.Context, d *kvstore.Doc, ver kvstore.Version) error {
	s := k.s
	ops := []any{}
	if ver > 0 {
		ops = append(ops, &zk.DeleteRequest{Path: s.docPath(d.Task, d.Slot), Version: int32(ver - 1)})
	}
	if op, err := s.waitOp(ctx, d.Task, d.Slot, false); err != nil {
		return err
	} else if op != nil {
		ops = append(ops, op)
	}
	if op, err := s.runningOp(ctx, d.Task, d.Slot, false); err != nil {
		return err
	} else if op != nil {
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return kvstore.ErrStale
	}
	return s.mapErr(err)
}

// Unrun removes run ids from the run index.
func (k kv) Unrun(ctx context.Context, runs []string) error {
	s := k.s
	for _, r := range runs {
		_, err := call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(s.runPath(r), -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return s.mapErr(err)
		}
	}
	return nil
}
