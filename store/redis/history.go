package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
)

// The history index (kvstore.HistoryKV): per task a sorted set of mark keys, all of score 0, read
// newest first with ZREVRANGEBYLEX and a LIMIT, O(log n + page). It is the task's key, in the
// task's hash tag, so that the scripts that write a document write its marks (write): in a
// Redis Cluster a script touches one slot. History across tasks reads each task's set (one
// pipelined round trip) and merges them (kvstore). The task's indexes of a kind are in the same set:
// their keys begin with "!KIND!" (kvstore.KindPrefix), below every mark's ('!' before the hex
// digits), so a read of the marks bounds its range at "0" and a read of a kind at its prefix; an
// older once's read of the marks meets them only past the oldest mark, and passes over them.

var _ kvstore.HistoryKV = kv{}

func (s *Store) historyKey(task string) string { return s.tkey(task, "history") }

// historyIndexed marks the prefix's history indexes as built (kvstore.HistoryKV.IndexHistory).
func (s *Store) historyIndexed() string { return s.key("history-indexed") }

func (k kv) HistoryIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.histBuilt.Load() {
		return true, nil
	}
	n, err := s.c.Exists(ctx, s.historyIndexed()).Result()
	if err != nil {
		return false, s.mapErr(err)
	}
	s.histBuilt.Store(n > 0)
	return n > 0, nil
}

// IndexHistory puts the marks of docs in their tasks' sets, a pipeline of up to 512 commands at a
// time, then marks the indexes built.
func (k kv) IndexHistory(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	p := s.c.Pipeline()
	for _, d := range docs {
		for _, m := range d.Marks() {
			p.ZAdd(ctx, s.historyKey(d.Task), goredis.Z{Member: m})
			if p.Len() == 512 {
				if _, err := p.Exec(ctx); err != nil {
					return s.mapErr(err)
				}
			}
		}
	}
	p.Set(ctx, s.historyIndexed(), "1", 0)
	if _, err := p.Exec(ctx); err != nil {
		return s.mapErr(err)
	}
	s.histBuilt.Store(true)
	return nil
}

// kindsIndexed marks the prefix's indexes of a kind as built (kvstore.HistoryKV.IndexKinds):
// kindsIndexed1 those of missed only, which an earlier once built and reads.
func (s *Store) kindsIndexed() string  { return s.key("history-kinds2-indexed") }
func (s *Store) kindsIndexed1() string { return s.key("history-kinds-indexed") }

func (k kv) KindsIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.kindBuilt.Load() {
		return true, nil
	}
	n, err := s.c.Exists(ctx, s.kindsIndexed()).Result()
	if err != nil {
		return false, s.mapErr(err)
	}
	s.kindBuilt.Store(n > 0)
	return n > 0, nil
}

// IndexKinds puts the kind marks of docs in their tasks' sets, a pipeline of up to 512 commands at
// a time, then marks the indexes of a kind built.
func (k kv) IndexKinds(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	p := s.c.Pipeline()
	for _, d := range docs {
		for _, m := range d.KindMarks() {
			p.ZAdd(ctx, s.historyKey(d.Task), goredis.Z{Member: m})
			if p.Len() == 512 {
				if _, err := p.Exec(ctx); err != nil {
					return s.mapErr(err)
				}
			}
		}
	}
	p.Set(ctx, s.kindsIndexed1(), "1", 0)
	p.Set(ctx, s.kindsIndexed(), "1", 0)
	if _, err := p.Exec(ctx); err != nil {
		return s.mapErr(err)
	}
	s.kindBuilt.Store(true)
	return nil
}

// HistoryTasks reads the task index (every task with a document is in it: Save).
func (k kv) HistoryTasks(ctx context.Context) ([]string, error) {
	s := k.s
	p := s.c.Pipeline()
	ep := p.Get(ctx, s.key("epoch"))
	tc := p.SMembers(ctx, s.key("tasks"))
	_, _ = p.Exec(ctx)
	if err := s.epochOK(ep); err != nil {
		return nil, err
	}
	tasks, err := tc.Result()
	return tasks, s.mapErr(err)
}

// ReadMarks reads the ranges in one pipelined round trip.
func (k kv) ReadMarks(ctx context.Context, rs []kvstore.MarkRange) ([][]string, error) {
	s := k.s
	p := s.c.Pipeline()
	cmds := make([]*goredis.StringSliceCmd, len(rs))
	for i, r := range rs {
		// The range's own keys: a kind's, after its prefix; the marks, from "0" (marks.go).
		by := &goredis.ZRangeBy{Min: "[0", Max: "+", Count: int64(r.Limit)}
		if r.Kind != "" {
			pre := kvstore.KindPrefix(r.Kind)
			by.Min, by.Max = "("+pre, "("+pre+"~"
		}
		if r.Up {
			if r.From != "" {
				by.Min = "(" + r.From
			}
			cmds[i] = p.ZRangeByLex(ctx, s.historyKey(r.Task), by)
		} else {
			if r.From != "" {
				by.Max = "(" + r.From
			}
			cmds[i] = p.ZRevRangeByLex(ctx, s.historyKey(r.Task), by)
		}
	}
	_, _ = p.Exec(ctx)
	out := make([][]string, len(rs))
	for i, c := range cmds {
		keys, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, s.mapErr(err)
		}
		out[i] = keys
	}
	return out, nil
}

func (k kv) Unmark(ctx context.Context, task string, keys []string) error {
	s := k.s
	if len(keys) == 0 {
		return nil
	}
	m := make([]any, len(keys))
	for i, key := range keys {
		m[i] = key
	}
	return s.mapErr(s.c.ZRem(ctx, s.historyKey(task), m...).Err())
}

// LoadMany reads the documents in one pipelined round trip (kvstore.ManyKV).
func (k kv) LoadMany(ctx context.Context, want [][2]string) ([]*kvstore.Doc, error) {
	s := k.s
	p := s.c.Pipeline()
	cmds := make([]*goredis.StringCmd, len(want))
	for i, ts := range want {
		cmds[i] = p.HGet(ctx, s.tkey(ts[0], "d:"+ts[1]), "d")
	}
	_, _ = p.Exec(ctx)
	out := make([]*kvstore.Doc, len(want))
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, s.mapErr(err)
		}
		if out[i], err = kvstore.Unmarshal(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}
