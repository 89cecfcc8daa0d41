package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// The history index (kvstore.HistoryKV): per task a key for each mark, x/<task>/<mark>, holding no
// value, and a key per task that has marks, y/<task>, for history across tasks. etcd applies a
// limit before sorting only in ascending key order (a descending range reads the whole range, then
// sorts), so a mark's key is stored inverted (flip): ascending order is history order, newest
// first, and a page newest first is a range with a limit, O(log n + page). A page After a cursor
// reads the other way, a descending range: it costs the entries newer than its cursor (a tail
// following the newest entries reads few). A task's index of a kind (kvstore.KindPrefix) is a
// key per mark under z/<task>/<kind>/, stored as the task's marks are: an older once never reads it.

var _ kvstore.HistoryKV = kv{}

func (s *Store) historyDir(task string) string  { return s.p + "x/" + esc(task) + "/" }
func (s *Store) historyTask(task string) string { return s.p + "y/" + esc(task) }

// kindDir is the directory of task's index of kind.
func (s *Store) kindDir(task string, kind store.State) string {
	return s.p + "z/" + esc(task) + "/" + esc(string(kind)) + "/"
}

// markDir is the directory of the index a key (kvstore.Mark.Key) belongs in, and the key there.
func (s *Store) markDir(task, key string) (string, string) {
	kind, m := kvstore.SplitKind(key)
	if kind == "" {
		return s.historyDir(task), m
	}
	return s.kindDir(task, kind), m
}

// markKey is the etcd key of a key (kvstore.Mark.Key) of task's indexes.
func (s *Store) markKey(task, key string) string {
	dir, m := s.markDir(task, key)
	return dir + flip(m)
}

// kindsIndexed marks the indexes of a kind as built (kvstore.HistoryKV.IndexKinds): kindsIndexed1
// those of missed only, which an earlier once built and reads.
func (s *Store) kindsIndexed() string  { return s.p + "meta/history-kinds2-indexed" }
func (s *Store) kindsIndexed1() string { return s.p + "meta/history-kinds-indexed" }

// historyIndexed marks the index as built (kvstore.HistoryKV.IndexHistory).
func (s *Store) historyIndexed() string { return s.p + "meta/history-indexed" }

// flip maps a mark key (hex digits, '~' in a bound) to a key whose byte order is the reverse:
// each character to its mirror, then '~', which sorts after every mirrored character, so that a
// key that is a prefix of another (a slot's name a prefix of another's) comes after it too.
func flip(k string) string {
	var b strings.Builder
	b.Grow(len(k) + 1)
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= '0' && c <= '9':
			b.WriteByte('P' - (c - '0'))
		case c >= 'a' && c <= 'f':
			b.WriteByte('F' - (c - 'a'))
		default: // '~', past every hex digit: before every mirrored one
			b.WriteByte('!')
		}
	}
	b.WriteByte('~')
	return b.String()
}

// unflip is flip's inverse for a stored key; ok is false for one flip does not write.
func unflip(k string) (string, bool) {
	if !strings.HasSuffix(k, "~") {
		return "", false
	}
	k = k[:len(k)-1]
	b := make([]byte, len(k))
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'G' && c <= 'P':
			b[i] = '0' + ('P' - c)
		case c >= 'A' && c <= 'F':
			b[i] = 'a' + ('F' - c)
		default:
			return "", false
		}
	}
	return string(b), true
}

// markOps are the operations that keep d's marks with its write: at most markOpsMax of them. A
// write that adds more (the first write of a document an older once let grow) says its marks are
// not all in the index (Doc.Unmarked) and leaves the rest to after it (later); removals past the
// bound are left to the pages that meet them.
func (s *Store) markOps(d *kvstore.Doc) (ops []op, later []string) {
	add, del := d.MarkChanges()
	if len(add) > markOpsMax {
		d.Unmarked()
		add, later = add[:markOpsMax], add[markOpsMax:]
	}
	if len(add) > 0 && len(d.ReadMarks()) == 0 { // a new document, or one an older once wrote: its task may be new here
		ops = append(ops, opPut(s.historyTask(d.Task), "", 0))
	}
	for _, k := range add {
		ops = append(ops, opPut(s.markKey(d.Task, k), "", 0))
	}
	for _, k := range del[:min(len(del), markOpsMax-len(add))] {
		ops = append(ops, opDel(s.markKey(d.Task, k), false))
	}
	return ops, later
}

// markOpsMax keeps a document's write within etcd's default --max-txn-ops (128).
const markOpsMax = 96

// putMarks puts keys in task's index, up to 128 a transaction (markOps' later ones, IndexHistory).
func (s *Store) putMarks(ctx context.Context, task string, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 127)
		ops := []op{opPut(s.historyTask(task), "", 0)}
		for _, k := range keys[:n] {
			ops = append(ops, opPut(s.markKey(task, k), "", 0))
		}
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			return s.mapErr(err)
		}
		keys = keys[n:]
	}
	return nil
}

func (k kv) HistoryIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.histBuilt.Load() {
		return true, nil
	}
	gr, err := s.c.get(ctx, s.historyIndexed())
	if err != nil {
		return false, s.mapErr(err)
	}
	s.histBuilt.Store(len(gr.Kvs) > 0)
	return len(gr.Kvs) > 0, nil
}

func (k kv) IndexHistory(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	for _, d := range docs {
		if err := s.putMarks(ctx, d.Task, d.Marks()); err != nil {
			return err
		}
	}
	if _, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.historyIndexed(), "1", 0)}}); err != nil {
		return s.mapErr(err)
	}
	s.histBuilt.Store(true)
	return nil
}

func (k kv) KindsIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.kindBuilt.Load() {
		return true, nil
	}
	gr, err := s.c.get(ctx, s.kindsIndexed())
	if err != nil {
		return false, s.mapErr(err)
	}
	s.kindBuilt.Store(len(gr.Kvs) > 0)
	return len(gr.Kvs) > 0, nil
}

func (k kv) IndexKinds(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	for _, d := range docs {
		if err := s.putMarks(ctx, d.Task, d.KindMarks()); err != nil {
			return err
		}
	}
	if _, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.kindsIndexed1(), "1", 0), opPut(s.kindsIndexed(), "1", 0)}}); err != nil {
		return s.mapErr(err)
	}
	s.kindBuilt.Store(true)
	return nil
}

// HistoryTasks lists y/: one key per task, keys only.
func (k kv) HistoryTasks(ctx context.Context) ([]string, error) {
	s := k.s
	gr, err := s.c.rng(ctx, rangeReq{Key: []byte(s.p + "y/"), RangeEnd: prefixEnd(s.p + "y/"), KeysOnly: true})
	if err != nil {
		return nil, s.mapErr(err)
	}
	out := make([]string, 0, len(gr.Kvs))
	for _, kv := range gr.Kvs {
		if t, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), s.p+"y/")); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// ReadMarks reads the ranges in one transaction (127 at a time).
func (k kv) ReadMarks(ctx context.Context, rs []kvstore.MarkRange) ([][]string, error) {
	s := k.s
	out := make([][]string, 0, len(rs))
	for len(rs) > 0 {
		n := min(len(rs), 127)
		var ops []op
		for _, r := range rs[:n] {
			dir, pre := s.historyDir(r.Task), kvstore.KindPrefix(r.Kind)
			if r.Kind != "" {
				dir = s.kindDir(r.Task, r.Kind)
			}
			from := strings.TrimPrefix(r.From, pre)
			q := rangeReq{Key: []byte(dir), RangeEnd: prefixEnd(dir), Limit: i64(r.Limit), KeysOnly: true}
			switch {
			case r.Up: // newer than From: before it in flipped order, nearest first
				q.Descend = true
				if from != "" {
					q.RangeEnd = []byte(dir + flip(from))
				}
			case from != "":
				q.Key = append([]byte(dir+flip(from)), 0)
			}
			ops = append(ops, op{Range: &q})
		}
		tr, err := s.c.txn(ctx, txnReq{Success: ops})
		if err != nil {
			return nil, s.mapErr(err)
		}
		if len(tr.Responses) != n {
			return nil, fmt.Errorf("%w: etcd at %s: the history index read returned %d responses", store.ErrUnavailable, s.where, len(tr.Responses))
		}
		for i, r := range rs[:n] {
			var keys []string
			dir, pre := s.historyDir(r.Task), kvstore.KindPrefix(r.Kind)
			if r.Kind != "" {
				dir = s.kindDir(r.Task, r.Kind)
			}
			if rr := tr.Responses[i].Range; rr != nil {
				for _, kv := range rr.Kvs {
					if m, ok := unflip(strings.TrimPrefix(string(kv.Key), dir)); ok {
						keys = append(keys, pre+m)
					}
				}
			}
			out = append(out, keys)
		}
		rs = rs[n:]
	}
	return out, nil
}

func (k kv) Unmark(ctx context.Context, task string, keys []string) error {
	s := k.s
	for len(keys) > 0 {
		n := min(len(keys), 128)
		ops := make([]op, n)
		for i, m := range keys[:n] {
			ops[i] = opDel(s.markKey(task, m), false)
		}
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			return s.mapErr(err)
		}
		keys = keys[n:]
	}
	return nil
}

// LoadMany reads the documents in one transaction of reads, 128 at a time (kvstore.ManyKV).
func (k kv) LoadMany(ctx context.Context, want [][2]string) ([]*kvstore.Doc, error) {
	s := k.s
	out := make([]*kvstore.Doc, 0, len(want))
	for len(want) > 0 {
		n := min(len(want), 128)
		ops := make([]op, n)
		for i, ts := range want[:n] {
			ops[i] = opGet(s.docKey(ts[0], ts[1]))
		}
		tr, err := s.c.txn(ctx, txnReq{Success: ops})
		if err != nil {
			return nil, s.mapErr(err)
		}
		if len(tr.Responses) != n {
			return nil, fmt.Errorf("%w: etcd at %s: a read of %d documents returned %d responses", store.ErrUnavailable, s.where, n, len(tr.Responses))
		}
		for _, r := range tr.Responses {
			var d *kvstore.Doc
			if r.Range != nil && len(r.Range.Kvs) > 0 {
				if d, err = kvstore.Unmarshal(r.Range.Kvs[0].Value); err != nil {
					return nil, err
				}
			}
			out = append(out, d)
		}
		want = want[n:]
	}
	return out, nil
}
