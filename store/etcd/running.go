package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

var _ kvstore.AllRunningKV = kv{}

// AllRunning reads every task's running index, its marks and the tasks' fence keys in one
// transaction (two ranges, keys only: the running slots and the tasks, never the ledger's
// documents), then the documents the index lists, 128 to a transaction. A task with a fence key
// (granted a lease) and no mark has an index an older once never built.
func (k kv) AllRunning(ctx context.Context) ([]*kvstore.Doc, []string, error) {
	s := k.s
	dir, fences := s.p+"a/", s.p+"f/"
	r, err := s.c.txn(ctx, txnReq{Success: []op{opRange(dir, true), opRange(fences, true)}})
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	if len(r.Responses) != 2 || r.Responses[0].Range == nil || r.Responses[1].Range == nil {
		return nil, nil, fmt.Errorf("%w: etcd at %s: the running index read returned %d responses", store.ErrUnavailable, s.where, len(r.Responses))
	}
	marked := map[string]bool{}
	var keys []string // the documents' keys
	for _, kv := range r.Responses[0].Range.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), dir)
		task, slot, entry := strings.Cut(rest, "/") // both escaped: neither holds a '/'
		if !entry {
			marked[task] = true
			continue
		}
		keys = append(keys, s.p+"d/"+task+"/"+slot)
	}
	var unindexed []string
	for _, kv := range r.Responses[1].Range.Kvs {
		task := strings.TrimPrefix(string(kv.Key), fences)
		if !marked[task] {
			if name, err := url.PathUnescape(task); err == nil {
				unindexed = append(unindexed, name)
			}
		}
	}
	var out []*kvstore.Doc
	for len(keys) > 0 {
		part := keys[:min(len(keys), 128)]
		keys = keys[len(part):]
		ops := make([]op, len(part))
		for i, key := range part {
			ops[i] = opGet(key)
		}
		r, err := s.c.txn(ctx, txnReq{Success: ops})
		if err != nil {
			return nil, nil, s.mapErr(err)
		}
		for _, resp := range r.Responses {
			if resp.Range == nil || len(resp.Range.Kvs) == 0 {
				continue // listed, but gone: the task's next Abandon takes the entry out
			}
			d, err := kvstore.Unmarshal(resp.Range.Kvs[0].Value)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, d)
		}
	}
	return out, unindexed, nil
}
