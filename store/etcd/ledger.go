package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvstore.Doc, kvstore.Version, time.Time, error) {
	gr, err := k.s.c.get(ctx, k.s.docKey(task, slot))
	if err != nil {
		return nil, 0, time.Time{}, k.s.mapErr(err)
	}
	now := time.UnixMicro(time.Now().UnixMicro())
	if len(gr.Kvs) == 0 {
		return nil, 0, now, nil
	}
	d, err := kvstore.Unmarshal(gr.Kvs[0].Value)
	return d, int64(gr.Kvs[0].ModRevision), now, err
}

// Save fences by the fence key's mod revision (the latest token) in one transaction; a token that
// is not the latest may be a seat's: then the transaction is sent again, fenced by the seat's
// record (seats.go), whose create revision is the token.
func (k kv) Save(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, token int64, run string) (kvstore.Version, error) {
	s := k.s
	key := s.docKey(d.Task, d.Slot)
	ops, later := s.docOps(d)
	ver, err := k.save(ctx, d, key, ver, token, run, ops)
	if err == nil {
		_ = s.putMarks(ctx, d.Task, later) // best effort: the document says its marks are not all in (markOps)
	}
	return ver, err
}

// save is Save's transactions.
func (k kv) save(ctx context.Context, d *kvstore.Doc, key string, ver kvstore.Version, token int64, run string, ops []op) (kvstore.Version, error) {
	s := k.s
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		ops = append(ops, opPut(s.runKey(run), string(b), 0))
	}
	if token <= 0 {
		r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(key, ver)}, Success: ops})
		if err != nil {
			return 0, s.mapErr(err)
		}
		if r.Succeeded {
			return int64(r.Header.Revision), nil
		}
		return 0, kvstore.ErrStale
	}
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(key, ver), cmpMod(s.fenceKey(d.Task), token)}, Success: ops,
		Failure: []op{opGet(s.fenceKey(d.Task)), opRange(s.recordDir(d.Task), true)}})
	if err != nil {
		return 0, s.mapErr(err)
	}
	if r.Succeeded {
		return int64(r.Header.Revision), nil
	}
	latest := int64(0)
	var records []keyValue
	if len(r.Responses) == 2 && r.Responses[0].Range != nil && r.Responses[1].Range != nil {
		if kvs := r.Responses[0].Range.Kvs; len(kvs) > 0 {
			latest = int64(kvs[0].ModRevision)
		}
		records = r.Responses[1].Range.Kvs
	}
	if latest == token {
		return 0, kvstore.ErrStale
	}
	rec, ok := byToken(records, token)
	if !ok {
		return 0, fmt.Errorf("%w: token %d is not a current lease token of task %q (latest %d)", store.ErrNotHeld, token, d.Task, latest)
	}
	rkey := string(rec.Key)
	r, err = s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(key, ver), cmpCreate(rkey, token)}, Success: ops, Failure: []op{opGet(rkey)}})
	if err != nil {
		return 0, s.mapErr(err)
	}
	if r.Succeeded {
		return int64(r.Header.Revision), nil
	}
	if len(r.Responses) == 1 && r.Responses[0].Range != nil && len(r.Responses[0].Range.Kvs) == 0 {
		return 0, fmt.Errorf("%w: seat token %d of task %q was cleared (an exclusive grant, or it expired and its place was taken)", store.ErrNotHeld, token, d.Task)
	}
	return 0, kvstore.ErrStale
}

// docOps write d and keep its slot's entries in the index of waiting slots and in the running
// index (both no-ops when already so; a delete also clears an entry an older once left).
func (s *Store) docOps(d *kvstore.Doc) ([]op, []string) {
	marks, later := s.markOps(d) // before Marshal: it may say the marks are not all in
	ops := []op{opPut(s.docKey(d.Task, d.Slot), string(d.Marshal()), 0)}
	if t, ok := d.Waits(); ok {
		ops = append(ops, opPut(s.waitKey(d.Task, d.Slot), strconv.FormatInt(t.UnixMicro(), 10), 0))
	} else {
		ops = append(ops, opDel(s.waitKey(d.Task, d.Slot), false))
	}
	if d.Runs() {
		ops = append(ops, opPut(s.runningKey(d.Task, d.Slot), "", 0))
	} else {
		ops = append(ops, opDel(s.runningKey(d.Task, d.Slot), false))
	}
	return append(ops, marks...), later
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	gr, err := k.s.c.get(ctx, k.s.runKey(runID))
	if err != nil {
		return "", "", k.s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return "", "", fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
	}
	var ts [2]string
	if err := json.Unmarshal(gr.Kvs[0].Value, &ts); err != nil {
		return "", "", fmt.Errorf("%w: corrupt run index for %q", store.ErrUnavailable, runID)
	}
	return ts[0], ts[1], nil
}

// Grants reads the fence, the live seats and the seats' records in one transaction.
func (k kv) Grants(ctx context.Context, task string) (kvstore.Grants, error) {
	v, err := k.s.readGrants(ctx, task, false)
	if err != nil {
		return kvstore.Grants{}, err
	}
	var g kvstore.Grants
	if len(v.fence) > 0 {
		g.Latest = int64(v.fence[0].ModRevision)
	}
	if len(v.records) > 0 {
		g.Seats = make(map[int64]bool, len(v.records))
		for _, rec := range v.records {
			_, live := byToken(v.seats, int64(rec.CreateRevision))
			g.Seats[int64(rec.CreateRevision)] = live
		}
	}
	return g, nil
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvstore.Doc, error) {
	p := k.s.p + "d/"
	if task != "" {
		p += esc(task) + "/"
	}
	gr, err := k.s.c.getPrefix(ctx, p)
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	out := make([]*kvstore.Doc, 0, len(gr.Kvs))
	for _, kv := range gr.Kvs {
		d, err := kvstore.Unmarshal(kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// waitingIndexed marks the index of waiting slots as built (kvstore.KV.Index).
func (s *Store) waitingIndexed() string { return s.p + "meta/waiting-indexed" }

// Waiting reads the index of waiting slots (one range) and their documents: it costs the slots
// waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvstore.Doc, bool, error) {
	s := k.s
	m, err := s.c.get(ctx, s.waitingIndexed())
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	if len(m.Kvs) == 0 {
		return nil, false, nil
	}
	gr, err := s.c.getPrefix(ctx, s.p+"w/")
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvstore.Doc
	for _, w := range gr.Kvs {
		dk := s.p + "d/" + strings.TrimPrefix(string(w.Key), s.p+"w/")
		dr, err := s.c.get(ctx, dk)
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		if len(dr.Kvs) == 0 {
			continue
		}
		d, err := kvstore.Unmarshal(dr.Kvs[0].Value)
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
	for _, d := range docs {
		if t, ok := d.Waits(); ok {
			if _, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.waitKey(d.Task, d.Slot), strconv.FormatInt(t.UnixMicro(), 10), 0)}}); err != nil {
				return s.mapErr(err)
			}
		}
	}
	_, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.waitingIndexed(), "1", 0)}})
	return s.mapErr(err)
}

// Delete removes the document and its index entries when it is still version ver.
func (k kv) Delete(ctx context.Context, d *kvstore.Doc, ver kvstore.Version) error {
	s := k.s
	key := s.docKey(d.Task, d.Slot)
	ops := []op{opDel(key, false), opDel(s.waitKey(d.Task, d.Slot), false), opDel(s.runningKey(d.Task, d.Slot), false)}
	marks := d.ReadMarks()
	for _, m := range marks[:min(len(marks), markOpsMax)] { // past it: taken out by the pages that meet them
		ops = append(ops, opDel(s.markKey(d.Task, m), false))
	}
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(key, ver)}, Success: ops})
	if err != nil {
		return s.mapErr(err)
	}
	if !r.Succeeded {
		return kvstore.ErrStale
	}
	if len(marks) > 0 && !d.IsArchive() {
		s.dropHistoryTask(ctx, d.Task)
	}
	return nil
}

// dropHistoryTask deletes task's name in the list of tasks with a history index (y/) when its
// indexes hold no key (its last document went: once prune --forget-slots), in one transaction that
// compares them empty: a write of a new document of the task puts the name again in its own. Best
// effort: a name left costs a page across tasks one empty range.
func (s *Store) dropHistoryTask(ctx context.Context, task string) {
	_, _ = s.c.txn(context.WithoutCancel(ctx), txnReq{
		Compare: []compare{cmpNone(s.historyDir(task)), cmpNone(s.p + "z/" + esc(task) + "/")},
		Success: []op{opDel(s.historyTask(task), false)},
	})
}

// Unrun removes run ids from the run index, up to 100 per transaction.
func (k kv) Unrun(ctx context.Context, runs []string) error {
	s := k.s
	for len(runs) > 0 {
		n := min(len(runs), 100)
		ops := make([]op, n)
		for i, r := range runs[:n] {
			ops[i] = opDel(s.runKey(r), false)
		}
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			return s.mapErr(err)
		}
		runs = runs[n:]
	}
	return nil
}
