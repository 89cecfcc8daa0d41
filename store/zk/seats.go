package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// Seats (store.AcquireRequest.Limit >= 2): a seat is a lock node like the exclusive grant's, with
// its Limit in its data. A seat holds when, among the live nodes ahead of it, none is exclusive and
// fewer than its Limit are seats; an exclusive node holds only with no live node ahead, so it is
// busy while any seat is live, and a seat is busy behind it. The task node's data is the fence:
// "LATEST" after an exclusive grant (an older once's format too), "LATEST S1 S2 …" while seats are
// current (tokens no exclusive grant came after). Ledger writes check it in Go and fence on the
// task node's version in their multi.

// fence is the task node's data: the latest token and the current seats' tokens.
type fence struct {
	latest int64
	seats  []int64
}

func parseFence(b []byte) fence {
	var f fence
	for i, w := range strings.Fields(string(b)) {
		n, _ := strconv.ParseInt(w, 10, 64)
		if i == 0 {
			f.latest = n
		} else if n > 0 {
			f.seats = append(f.seats, n)
		}
	}
	return f
}

func (f fence) bytes() []byte {
	b := strconv.AppendInt(nil, f.latest, 10)
	for _, t := range f.seats {
		b = strconv.AppendInt(append(b, ' '), t, 10)
	}
	return b
}

// current reports whether a ledger write with token is fenced in (kvstore.Grants.Current).
func (f fence) current(token int64) bool {
	return token > 0 && (token == f.latest || slices.Contains(f.seats, token))
}

// readFence returns the task's fence and the task node's version (-1 when there is no node).
func (s *Store) readFence(ctx context.Context, task string) (fence, int32, error) {
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(s.taskPath(task)); return r{b, st}, err })
	if errors.Is(err, zk.ErrNoNode) {
		return fence{}, -1, nil
	}
	if err != nil {
		return fence{}, 0, s.mapErr(err)
	}
	return parseFence(got.b), got.st.Version, nil
}

// publishSeat adds the seat token mine (node path) to the task's fence while the node exists,
// in a versioned multi retried when a concurrent grant changed the fence. Seats older than mine
// that are not in ahead (the live seats ahead of it) are gone or found expired: they leave the
// fence. A fence whose latest token is newer than mine and is no seat's is an exclusive grant's:
// then the seat is not granted.
func (s *Store) publishSeat(ctx context.Context, task, path string, mine int64, ahead []int64) error {
	dir := s.taskPath(task)
	for try := 0; try < 64; try++ {
		f, v, err := s.readFence(ctx, task)
		if err != nil {
			return err
		}
		if f.latest > mine && !slices.Contains(f.seats, f.latest) {
			return &store.BusyError{Lease: store.Lease{Task: task, Token: f.latest}}
		}
		nf := fence{latest: max(f.latest, mine)}
		for _, t := range f.seats {
			if t > mine || slices.Contains(ahead, t) {
				nf.seats = append(nf.seats, t)
			}
		}
		nf.seats = append(nf.seats, mine)
		slices.Sort(nf.seats)
		_, err = call(ctx, s, func() ([]zk.MultiResponse, error) {
			return s.c.Multi(&zk.CheckVersionRequest{Path: path, Version: -1}, &zk.SetDataRequest{Path: dir, Data: nf.bytes(), Version: v})
		})
		if !errors.Is(err, zk.ErrBadVersion) {
			return s.mapErr(err)
		}
	}
	return fmt.Errorf("%w: task %q: too many concurrent grants", store.ErrConflict, task)
}

// grants is kvstore.KV.Grants: the fence, and, when it has seats, which of them are live (their
// node exists and has not expired by ZooKeeper's clock). An exclusive grant's fence costs one read.
func (s *Store) grants(ctx context.Context, task string) (kvstore.Grants, error) {
	f, _, err := s.readFence(ctx, task)
	if err != nil || len(f.seats) == 0 {
		return kvstore.Grants{Latest: f.latest}, err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return kvstore.Grants{}, err
	}
	ls, err := s.taskLeases(ctx, task, now.UnixMilli())
	if err != nil {
		return kvstore.Grants{}, err
	}
	g := kvstore.Grants{Latest: f.latest, Seats: make(map[int64]bool, len(f.seats))}
	for _, t := range f.seats {
		g.Seats[t] = slices.ContainsFunc(ls, func(l store.Lease) bool { return l.Token == t })
	}
	return g, nil
}

// taskLeases lists the live grants of task by ZooKeeper's clock now (ms): its lowest live node,
// and when that is a seat, the live seats after it that hold (fewer live seat nodes ahead than
// their Limit, no exclusive node ahead); a node that does not hold is a contender about to give up.
func (s *Store) taskLeases(ctx context.Context, task string, now int64) ([]store.Lease, error) {
	dir := s.taskPath(task)
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	var out []store.Lease
	ahead := 0 // live seat nodes ahead, as Acquire counts them
	for _, k := range s.sortChildren(kids) {
		d, st, ok, err := s.node(ctx, dir+"/"+k)
		if err != nil {
			return nil, err
		}
		if !ok || st.Mtime+d.TTL <= now {
			continue
		}
		if d.Limit < 2 { // the exclusive grant, or an exclusive contender behind seats
			if ahead == 0 {
				out = append(out, lease(task, d, st))
			}
			break
		}
		if ahead < d.Limit {
			out = append(out, lease(task, d, st))
		}
		ahead++
	}
	return out, nil
}
