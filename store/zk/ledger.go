package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
//
// The slot's node in the running index is written as the document as read says it stands (Ran):
// created when an attempt starts running, deleted when none runs any more, and checked while one
// runs, so that an entry missing (an older once began the attempt) is put back by the next write.
// A multi that fails on that node alone is made again with the node as it is: an entry left over
// is Abandon's to take out, and a task whose index is not built (no directory) gets none.
func (k kv) save(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, token int64, run, release string) (kvstore.Version, error) {
	s := k.s
	var fenceOp any
	if token > 0 {
		f, v, err := s.readFence(ctx, d.Task)
		if err != nil {
			return 0, err
		}
		if !f.current(token) {
			return 0, notCurrent(d.Task, token, f)
		}
		fenceOp = &zk.CheckVersionRequest{Path: s.taskPath(d.Task), Version: v}
	}
	var waitOp any
	if _, waits := d.Waits(); waits != d.Waited() {
		var err error
		if waitOp, err = s.waitOp(ctx, d.Task, d.Slot, waits); err != nil {
			return 0, err
		}
	}
	rpath := s.runningPath(d.Task, d.Slot)
	runOp := s.runningOp(d, rpath)
	marks, err := s.markOps(ctx, d, ver)
	if err != nil {
		return 0, err
	}
	for try, fixes := 0, 0; ; try++ {
		ops, docAt, runAt, relAt := s.saveOps(d, ver, run, release, fenceOp, waitOp, runOp)
		markAt := len(ops)
		ops = append(ops, marks...)
		res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
		if err == nil {
			return ver + 1, nil // the node's version went up by one (a created node's is 0: ver 1)
		}
		failed := func(i int, target error) bool {
			return i >= 0 && i < len(res) && len(res) == len(ops) && errors.Is(res[i].Error, target)
		}
		if again, ferr := false, error(nil); fixes < len(marks)+2 && len(res) == len(ops) {
			if marks, again, ferr = s.retryMarks(ctx, d.Task, marks, res, markAt); ferr != nil {
				return 0, ferr
			} else if again {
				fixes++
				continue
			}
		}
		if try < 3 {
			switch {
			case failed(docAt, zk.ErrNoNode): // the task's first document: its directory first, with its history's
				if err := s.makeDocDir(ctx, d); err != nil {
					return 0, err
				}
				continue
			case failed(relAt, zk.ErrNoNode):
				release = ""
				continue
			case failed(runAt, zk.ErrNodeExists), failed(runAt, zk.ErrNoNode) && isCreate(runOp), failed(runAt, zk.ErrNoNode) && isDelete(runOp):
				runOp = nil // left over, not built, or gone already
				continue
			case failed(runAt, zk.ErrNoNode): // checked, missing: put it back
				runOp = &zk.CreateRequest{Path: rpath, Acl: s.acl}
				continue
			}
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
}

// runningOp is the op on the slot's node rpath in the running index, as the document as read
// says it stands (save): nil when none runs and none ran.
func (s *Store) runningOp(d *kvstore.Doc, rpath string) any {
	switch runs, ran := d.Runs(), d.Ran(); {
	case runs && !ran:
		return &zk.CreateRequest{Path: rpath, Acl: s.acl}
	case runs && ran:
		return &zk.CheckVersionRequest{Path: rpath, Version: -1}
	case ran:
		return &zk.DeleteRequest{Path: rpath, Version: -1}
	}
	return nil
}

// saveOps are save's multi: the fence's check, the document's write, the run index's entry, the
// index nodes' ops and the release, and where the document's creation, the running node's op and
// the release are in it (-1: not there).
func (s *Store) saveOps(d *kvstore.Doc, ver kvstore.Version, run, release string, fenceOp, waitOp, runOp any) (ops []any, docAt, runAt, relAt int) {
	add := func(op any) int {
		if op == nil {
			return -1
		}
		ops = append(ops, op)
		return len(ops) - 1
	}
	add(fenceOp)
	path := s.docPath(d.Task, d.Slot)
	docAt = -1
	if ver == 0 {
		docAt = add(&zk.CreateRequest{Path: path, Data: d.Marshal(), Acl: s.acl})
	} else {
		add(&zk.SetDataRequest{Path: path, Data: d.Marshal(), Version: int32(ver - 1)})
	}
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		add(&zk.CreateRequest{Path: s.runPath(run), Data: b, Acl: s.acl})
	}
	add(waitOp)
	runAt = add(runOp)
	relAt = -1
	if release != "" {
		relAt = add(&zk.DeleteRequest{Path: release, Version: -1})
	}
	return ops, docAt, runAt, relAt
}

// makeDocDir makes the directory of a task's first document, with its history index's buckets
// for the document's first mark in the same multi.
func (s *Store) makeDocDir(ctx context.Context, d *kvstore.Doc) error {
	add, _ := d.MarkChanges()
	for _, k := range add { // a mark of the task's index: its directory is made with the document's
		if kind, _ := kvstore.SplitKind(k); kind == "" {
			return s.makeMarkDirs(ctx, d.Task, k, s.docDir(d.Task))
		}
	}
	return s.ensure(ctx, s.docDir(d.Task))
}

// retryMarks handles a multi whose ops from markAt on are marks, res its answers: when a mark op
// failed it (fixMark), it returns the marks to send again and true.
func (s *Store) retryMarks(ctx context.Context, task string, marks []any, res []zk.MultiResponse, markAt int) ([]any, bool, error) {
	i := firstFailed(res) - markAt
	if i < 0 {
		return marks, false, nil
	}
	drop, ok, err := s.fixMark(ctx, task, marks[i], res[markAt+i].Error)
	if err != nil || !ok {
		return marks, false, err
	}
	if drop {
		marks = slices.Delete(slices.Clone(marks), i, i+1)
		if isBucket(res[markAt+i].Error, marks...) {
			// One bucket there, others likely too (an archive's marks are its slot's instants):
			// find them all in one read rather than one failed multi each.
			if marks, err = s.dropBuckets(ctx, marks); err != nil {
				return marks, false, err
			}
		}
	}
	return marks, true, nil
}

// isBucket reports whether err is a bucket create's ErrNodeExists and marks still create buckets.
func isBucket(err error, marks ...any) bool {
	if !errors.Is(err, zk.ErrNodeExists) {
		return false
	}
	return slices.ContainsFunc(marks, isBucketCreate)
}

func isBucketCreate(op any) bool {
	c, ok := op.(*zk.CreateRequest)
	return ok && len(c.Path)-strings.LastIndex(c.Path, "/")-1 == markLevels[len(markLevels)-1]
}

// dropBuckets takes out of marks the creates of buckets that exist, checked in parallel
// (go-zookeeper pipelines them on its session: one round trip), and makes the directories missing
// above those of an index of a kind (bucketChain: one multi of checks each tells them) in one
// multi: a busy or skipped run's first event of its kind in 72 minutes, in the second of its
// task's write before it, costs no failed multi more than its bucket's.
func (s *Store) dropBuckets(ctx context.Context, marks []any) ([]any, error) {
	missing := make([][]string, len(marks)) // a bucket's chain from its first missing directory on; none: it exists
	errs := make([]error, len(marks))
	var wg sync.WaitGroup
	for i, op := range marks {
		if !isBucketCreate(op) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := op.(*zk.CreateRequest).Path
			if chain := s.bucketChain(path); len(chain) > 1 {
				missing[i], errs[i] = s.missingDirs(ctx, chain)
				return
			}
			ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(path); return ok, err })
			if errs[i] = s.mapErr(err); !ok {
				missing[i] = []string{path}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return marks, err
	}
	out := make([]any, 0, len(marks))
	var above []string
	seen := map[string]bool{}
	for i, op := range marks {
		if isBucketCreate(op) && len(missing[i]) == 0 {
			continue
		}
		for _, dir := range missing[i][:max(len(missing[i])-1, 0)] {
			if !seen[dir] {
				seen[dir] = true
				above = append(above, dir)
			}
		}
		out = append(out, op)
	}
	return out, s.makeDirs(ctx, above)
}

// makeDirs makes dirs (outermost first) in one multi. One made (or a parent deleted) meanwhile
// fails it: the write's multi then fails at its bucket, which fixMark makes again.
func (s *Store) makeDirs(ctx context.Context, dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	ops := make([]any, len(dirs))
	for i, d := range dirs {
		ops[i] = &zk.CreateRequest{Path: d, Acl: s.acl}
	}
	_, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return s.mapErr(err)
}

// firstFailed is the place of the op whose error failed a multi (the ops before it answer no
// error, those after it an inconsistency): -1 when none.
func firstFailed(res []zk.MultiResponse) int {
	for i, r := range res {
		if r.Error != nil {
			return i
		}
	}
	return -1
}

func isCreate(op any) bool { _, ok := op.(*zk.CreateRequest); return ok }
func isDelete(op any) bool { _, ok := op.(*zk.DeleteRequest); return ok }

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
	var dirs []string
	if task != "" {
		dirs = []string{s.docDir(task)}
	} else {
		ts, err := s.childrenOrNone(ctx, s.p+"/d")
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			dirs = append(dirs, s.p+"/d/"+t)
		}
	}
	var out []*kvstore.Doc
	for _, dir := range dirs {
		slots, err := s.childrenOrNone(ctx, dir)
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

// Delete removes the document and its index nodes when it is still version ver. Version 0 (no
// document) takes the index nodes out while the document is still missing: its creation and
// deletion go in the same multi, which fails if it exists.
func (k kv) Delete(ctx context.Context, d *kvstore.Doc, ver kvstore.Version) error {
	s := k.s
	path, rpath := s.docPath(d.Task, d.Slot), s.runningPath(d.Task, d.Slot)
	ops := []any{}
	if ver > 0 {
		ops = append(ops, &zk.DeleteRequest{Path: path, Version: int32(ver - 1)})
	} else {
		ops = append(ops, &zk.CreateRequest{Path: path, Acl: s.acl}, &zk.DeleteRequest{Path: path, Version: 0})
	}
	if op, err := s.waitOp(ctx, d.Task, d.Slot, false); err != nil {
		return err
	} else if op != nil {
		ops = append(ops, op)
	}
	running, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(rpath); return ok, err })
	if err != nil {
		return s.mapErr(err)
	}
	if running {
		ops = append(ops, &zk.DeleteRequest{Path: rpath, Version: -1})
	}
	res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if ver == 0 && len(res) == len(ops) && errors.Is(res[0].Error, zk.ErrNoNode) {
		// No directory for the task's documents, so no document: the index nodes alone.
		ops = ops[2:]
		if len(ops) == 0 {
			return nil
		}
		_, err = call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	}
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
		return kvstore.ErrStale
	}
	if err == nil {
		_ = k.Unmark(ctx, d.Task, d.ReadMarks()) // best effort: a mark left is taken out by the page that meets it
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
