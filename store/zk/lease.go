package zk

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/store"
)

type nodeData struct {
	Holder string `json:"holder"`
	RunID  string `json:"run_id"`
	TTL    int64  `json:"ttl_ms"`
	Limit  int    `json:"limit,omitempty"` // a seat's (seats.go); 0 for the exclusive grant
}

func lease(task string, d nodeData, st *zk.Stat) store.Lease {
	return store.Lease{Task: task, Holder: d.Holder, RunID: d.RunID, Token: st.Czxid, Acquired: ms(st.Ctime), Expires: ms(st.Mtime + d.TTL), Limit: d.Limit}
}

// node reads a lock node; ok is false when it is gone.
func (s *Store) node(ctx context.Context, path string) (nodeData, *zk.Stat, bool, error) {
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(path); return r{b, st}, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nodeData{}, nil, false, nil
	}
	if err != nil {
		return nodeData{}, nil, false, s.mapErr(err)
	}
	var d nodeData
	if err := json.Unmarshal(got.b, &d); err != nil {
		return d, nil, false, fmt.Errorf("%w: corrupt lock node %s: %v", store.ErrUnavailable, path, err)
	}
	return d, got.st, true, nil
}

// Acquire runs the lock recipe without waiting; with req.Replace, live nodes ahead of ours are
// deleted too (clear), which ends their grants: their Renew finds no node and their Lost watch
// sees the deletion. Round trips when free: create and children together (createLockNode), and the
// multi that publishes the token (publishAlone); a listing that raced another contender's node, or
// nodes ahead of ours, cost a read of our node's stat (and the children again). A seat
// (req.Limit >= 2) also reads the fence to add its token to it (seats.go). See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	req, err := checkAcquire(req)
	if err != nil {
		return store.Lease{}, err
	}
	dir := s.taskPath(req.Task)
	c, err := s.createLockNode(ctx, req)
	if err != nil {
		return store.Lease{}, err
	}
	mine, name := c.path, c.path[strings.LastIndex(c.path, "/")+1:]
	giveUp := func(err error) (store.Lease, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = call(dctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(mine, -1) })
		return store.Lease{}, err
	}
	known, alone := c.listed(name)
	if alone && req.Limit < 2 {
		return s.publishAlone(ctx, req, c, giveUp)
	}
	d, st, ok, kids, err, kerr := s.nodeAndSiblings(ctx, mine, dir, known)
	if err != nil || !ok {
		return giveUp(errors.Join(err, fmt.Errorf("%w: zookeeper: my lock node vanished (session lost)", store.ErrUnavailable)))
	}
	now := st.Ctime // ZooKeeper's clock
	if kerr != nil {
		return giveUp(s.mapErr(kerr))
	}
	var replaced *store.Lease
	var ended []int64 // the tokens of the live grants cleared (replaced)
	var seats []int64 // the live seat nodes ahead of a seat's
	for _, k := range s.sortChildren(kids) {
		if seq(k) >= seq(name) {
			break
		}
		old, err := s.clear(ctx, req, dir+"/"+k, now, st.Czxid)
		var busy *store.BusyError
		if req.Limit >= 2 && errors.As(err, &busy) && busy.Lease.Limit >= 2 && len(seats)+1 < req.Limit {
			seats = append(seats, busy.Lease.Token)
			continue
		}
		if err != nil {
			return giveUp(err)
		}
		if old != nil {
			ended = append(ended, old.Token)
		}
		if old != nil && (replaced == nil || old.Expires.After(replaced.Expires)) {
			replaced = old
		}
	}
	if req.Limit >= 2 {
		err = s.publishSeat(ctx, req.Task, mine, st.Czxid, seats)
	} else {
		// Lowest live node: publish the token, only while the node still exists; an exclusive
		// grant's fence has no seats (it ends theirs).
		tok := strconv.FormatInt(st.Czxid, 10)
		_, err = call(ctx, s, func() ([]zk.MultiResponse, error) {
			return s.c.Multi(&zk.CheckVersionRequest{Path: mine, Version: -1}, &zk.SetDataRequest{Path: dir, Data: []byte(tok), Version: -1})
		})
		err = s.mapErr(err)
	}
	if err != nil {
		return giveUp(err)
	}
	s.mu.Lock()
	s.paths[st.Czxid] = mine
	s.holders[st.Czxid] = req.Holder
	s.mu.Unlock()
	l := lease(req.Task, d, st)
	if replaced != nil {
		slices.Sort(ended)
		l.Replaced = &store.Replacement{Lease: *replaced, Tokens: ended}
	}
	return l, nil
}

// nodeAndSiblings reads the lock node mine (its czxid is the token, its ctime ZooKeeper's clock, as
// node) and the children of dir, the task's lock nodes, together: both requests in flight at once,
// one round trip. kerr is the listing's error. A listing known (created.listed: it has every node
// ahead of ours) is not read again.
func (s *Store) nodeAndSiblings(ctx context.Context, mine, dir string, known []string) (d nodeData, st *zk.Stat, ok bool, kids []string, err, kerr error) {
	if known != nil {
		d, st, ok, err = s.node(ctx, mine)
		return d, st, ok, known, err, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kids, kerr = call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
	}()
	d, st, ok, err = s.node(ctx, mine)
	<-done
	return d, st, ok, kids, err, kerr
}

// created is a lock node just created (path, its data) and the listing of the task's lock nodes
// (kids, and the task node's stat dir) that was in flight with the create: nil when it failed.
type created struct {
	path string
	data []byte
	kids []string
	dir  *zk.Stat
}

// listed reports what the listing in flight with the create (go-zookeeper sends them from two
// goroutines, in either order) is good for. known: the listing, when it has our node (name), so it
// was read after our create and has every node ahead of ours that is still there; nil when it
// must be read again. alone: ours is the only node, so the task node's pzxid (the zxid of the last
// change to its children) is our node's czxid, the token, or the zxid of a delete since (a node
// created and deleted after ours, or one ahead of ours deleted), which is no grant's token: no
// transaction that deletes a lock node creates one (publishAlone finds out which it is). alone
// also needs the pzxid above the task node's mzxid (its fence's last write): every token a grant
// ever published is below that, so even a pzxid that the server got wrong (a replay bug) could
// never make a stale holder's token current; it holds unless the fence was written after the
// children last changed, and then Acquire reads our node instead.
func (c created) listed(name string) (known []string, alone bool) {
	if c.dir == nil || !slices.Contains(c.kids, name) {
		return nil, false
	}
	return c.kids, len(c.kids) == 1 && c.dir.Pzxid > c.dir.Mzxid
}

// checkAcquire refuses what store.AcquireRequest.Check does, a bad Limit (store.CheckLimit) and a
// TTL below 1ms, and makes a Limit below 2 the exclusive grant's 0.
func checkAcquire(req store.AcquireRequest) (store.AcquireRequest, error) {
	if err := cmp.Or(req.Check(), store.CheckLimit(req)); err != nil {
		return req, err
	}
	if req.Limit < 2 {
		req.Limit = 0
	}
	if req.TTL < time.Millisecond {
		return req, fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	return req, nil
}

// createLockNode creates req's ephemeral sequential lock node under the task, with the listing of
// the task's lock nodes in flight beside it (one round trip for both: created.listed says what it
// is good for). On the task's first acquire it makes the task's lock directory, and its running
// index's, built (empty: nothing can have run before); that create goes alone.
func (s *Store) createLockNode(ctx context.Context, req store.AcquireRequest) (created, error) {
	dir := s.taskPath(req.Task)
	data, _ := json.Marshal(nodeData{Holder: req.Holder, RunID: req.RunID, TTL: ttlMillis(req.TTL), Limit: req.Limit})
	create := func() (string, error) { return s.c.Create(dir+"/n-", data, zk.FlagEphemeral|zk.FlagSequence, s.acl) }
	type listing struct {
		kids []string
		st   *zk.Stat
	}
	var (
		l    listing
		lerr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		l, lerr = call(ctx, s, func() (listing, error) { k, st, err := s.c.Children(dir); return listing{k, st}, err })
	}()
	mine, err := call(ctx, s, create)
	<-done
	c := created{path: mine, data: data}
	if err == nil && lerr == nil {
		c.kids, c.dir = l.kids, l.st
	}
	if errors.Is(err, zk.ErrNoNode) {
		if err := s.ensure(ctx, dir); err != nil {
			return c, err
		}
		if err := s.markRunning(ctx, req.Task); err != nil {
			return c, err
		}
		c.path, err = call(ctx, s, create)
	}
	return c, s.mapErr(err)
}

// publishAlone is Acquire's end for an exclusive grant whose node c is alone (created.listed):
// one multi publishes the task node's pzxid as the token in the fence and rewrites our node with
// its own data, which fails when the node is gone (as the check of Acquire's other path) and
// returns its stat, so that the node is not read on its own. Its mtime, now the publish's, is
// where its expiry counts from (node mtime + ttl, as every contender judges it). When its czxid
// is not the pzxid (a delete came between our create and the listing), the fence named no grant
// in between, and a second multi publishes the czxid while the node exists.
func (s *Store) publishAlone(ctx context.Context, req store.AcquireRequest, c created, giveUp func(error) (store.Lease, error)) (store.Lease, error) {
	dir := s.taskPath(req.Task)
	publish := func(first any, tok int64) ([]zk.MultiResponse, error) {
		return call(ctx, s, func() ([]zk.MultiResponse, error) {
			return s.c.Multi(first, &zk.SetDataRequest{Path: dir, Data: strconv.AppendInt(nil, tok, 10), Version: -1})
		})
	}
	res, err := publish(&zk.SetDataRequest{Path: c.path, Data: c.data, Version: -1}, c.dir.Pzxid)
	if err == nil && (len(res) < 1 || res[0].Stat == nil) {
		err = fmt.Errorf("zookeeper at %s: the publish of %s returned no stat", s.where, c.path)
	}
	if err != nil {
		return giveUp(s.mapErr(err))
	}
	st := res[0].Stat
	if st.Czxid != c.dir.Pzxid {
		if _, err := publish(&zk.CheckVersionRequest{Path: c.path, Version: -1}, st.Czxid); err != nil {
			return giveUp(s.mapErr(err))
		}
	}
	s.mu.Lock()
	s.paths[st.Czxid] = c.path
	s.holders[st.Czxid] = req.Holder
	s.mu.Unlock()
	return lease(req.Task, nodeData{Holder: req.Holder, RunID: req.RunID, TTL: ttlMillis(req.TTL)}, st), nil
}

// clear removes the lower lock node path ahead of ours when it has expired by ZooKeeper's clock
// (now), or, with req.Replace, while it is live: then it returns the grant it ended, as last
// renewed (a renewal in between fails the versioned delete and is read again). A live node
// without Replace is the busy answer.
func (s *Store) clear(ctx context.Context, req store.AcquireRequest, path string, now, mine int64) (*store.Lease, error) {
	for try := 0; ; try++ {
		od, ost, ok, err := s.node(ctx, path)
		if err != nil || !ok {
			return nil, err
		}
		live := ost.Mtime+od.TTL > now
		if live && (!req.Replace || try >= 3) {
			return nil, &store.BusyError{Lease: lease(req.Task, od, ost)}
		}
		if live {
			err = s.endLive(ctx, req.Task, path, ost.Version, mine)
		} else {
			_, err = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, ost.Version) })
		}
		switch {
		case err == nil && live:
			old := lease(req.Task, od, ost)
			return &old, nil
		case err == nil || errors.Is(err, zk.ErrNoNode):
			return nil, nil
		case errors.Is(err, zk.ErrBadVersion):
			if !req.Replace {
				// Renewed meanwhile: live again.
				if od, ost, ok, _ := s.node(ctx, path); ok {
					return nil, &store.BusyError{Lease: lease(req.Task, od, ost)}
				}
				return nil, nil
			}
		default:
			return nil, s.mapErr(err)
		}
	}
}

// endLive deletes the live lock node path (at version) of a grant being replaced and, in the same
// multi, moves the task's fence to the replacing node's token mine (or keeps a newer one): the
// replaced grant's ledger writes are refused from then on, not only once the replacing grant
// publishes its token. (In between, a holder that saw its node go could record its own attempt
// unknown, and the replacing run, which resolves the attempts Abandon hands it, found its slot in
// review.) A fence changed meanwhile is ErrBadVersion, as a renewal is: clear reads again.
func (s *Store) endLive(ctx context.Context, task, path string, version int32, mine int64) error {
	f, fv, err := s.readFence(ctx, task)
	if err != nil {
		return err
	}
	nf := fence{latest: max(f.latest, mine)}
	_, err = call(ctx, s, func() ([]zk.MultiResponse, error) {
		return s.c.Multi(&zk.DeleteRequest{Path: path, Version: version}, &zk.SetDataRequest{Path: s.taskPath(task), Data: nf.bytes(), Version: fv})
	})
	return err
}

// errMismatch: the token's node exists but names another holder.
var errMismatch = fmt.Errorf("%w: holder mismatch", store.ErrNotHeld)

// find returns the path of l's lock node when it exists and is l's (token and holder).
func (s *Store) find(ctx context.Context, l store.Lease) (string, nodeData, *zk.Stat, error) {
	s.mu.Lock()
	path, cached := s.paths[l.Token]
	s.mu.Unlock()
	var cands []string
	if cached {
		cands = []string{path}
	} else {
		dir := s.taskPath(l.Task)
		kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return "", nodeData{}, nil, s.mapErr(err)
		}
		for _, k := range s.sortChildren(kids) {
			cands = append(cands, dir+"/"+k)
		}
	}
	for _, p := range cands {
		d, st, ok, err := s.node(ctx, p)
		if err != nil {
			return "", d, nil, err
		}
		if ok && st.Czxid == l.Token {
			if d.Holder != l.Holder {
				return "", d, nil, fmt.Errorf("%w: task %q token %d is held by %q, not %q", errMismatch, l.Task, l.Token, d.Holder, l.Holder)
			}
			return p, d, st, nil
		}
	}
	return "", nodeData{}, nil, fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// Renew rewrites l's node (its mtime is the renewal time by ZooKeeper's clock). A grant found
// expired by then is deleted and reported ErrNotHeld. See store.Leaser.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	path, d, st, err := s.find(ctx, l)
	if err != nil {
		return store.Lease{}, err
	}
	old := st.Mtime + d.TTL
	d.TTL = ttlMillis(ttl)
	data, _ := json.Marshal(d)
	nst, err := call(ctx, s, func() (*zk.Stat, error) { return s.c.Set(path, data, st.Version) })
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d was replaced during renewal", store.ErrNotHeld, l.Task, l.Token)
	}
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	if nst.Mtime >= old {
		_, _ = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, nst.Version) })
		return store.Lease{}, fmt.Errorf("%w: task %q token %d expired before the renewal", store.ErrNotHeld, l.Task, l.Token)
	}
	return lease(l.Task, d, nst), nil
}

// Release deletes l's node. An expired grant nobody replaced (still in the fence) releases fine.
// The node this store created for the grant is deleted without reading it first: it is the grant's
// while it exists (its name is sequential, never reused). See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	s.mu.Lock()
	path, mine := s.paths[l.Token]
	mine = mine && s.holders[l.Token] == l.Holder
	s.mu.Unlock()
	if mine {
		_, err := call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, -1) })
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			s.forget(l.Token)
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return s.mapErr(err)
		}
		return s.releaseGone(ctx, l, fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder))
	}
	path, _, st, err := s.find(ctx, l)
	if errors.Is(err, store.ErrNotHeld) && !errors.Is(err, errMismatch) {
		return s.releaseGone(ctx, l, err)
	}
	if err != nil {
		return err
	}
	_, err = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, st.Version) })
	s.forget(l.Token)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return fmt.Errorf("%w: task %q token %d was replaced during release", store.ErrNotHeld, l.Task, l.Token)
	}
	return s.mapErr(err)
}

// releaseGone is Release of a grant whose node is gone already (expired and cleared, or replaced):
// released fine while the fence still carries its token, else notHeld.
func (s *Store) releaseGone(ctx context.Context, l store.Lease, notHeld error) error {
	if f, _, err := s.readFence(ctx, l.Task); err == nil && f.current(l.Token) {
		return nil
	}
	return notHeld
}

// Now returns ZooKeeper's clock: the mtime of a write to /once/<prefix>/clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	st, err := call(ctx, s, func() (*zk.Stat, error) { return s.c.Set(s.p+"/clock", nil, -1) })
	if err != nil {
		return time.Time{}, s.mapErr(err)
	}
	return ms(st.Mtime), nil
}

// Leases lists, per task, the live grants by ZooKeeper's clock: the lowest live lock node, and
// every seat that holds with it (taskLeases). The tasks are read in parallel reads, which
// go-zookeeper pipelines on its one session (as AllRunning's): one after another they cost a
// round trip per task, 0.1 s a call on a store of 100 tasks at 1 ms a round trip.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	tasks, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.p + "/locks"); return k, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	per := make([][]store.Lease, len(tasks))
	if err := each(ctx, len(tasks), func(i int) (err error) {
		per[i], err = s.taskLeases(ctx, unesc(tasks[i]), now.UnixMilli())
		return err
	}); err != nil {
		return nil, err
	}
	out := []store.Lease{}
	for _, ls := range per {
		out = append(out, ls...)
	}
	return out, nil
}

var _ store.TaskLister = (*Store)(nil)

// Tasks lists the task index from the name after on (store.TaskLister): the children of
// /once/<prefix>/locks, one persistent node per task created by its first Acquire and never
// deleted (its lock nodes come and go under it). ZooKeeper lists a node's children whole and
// unordered, so a page reads every task's name (one round trip; no attempt, document or lock node)
// and keeps the ones it returns.
func (s *Store) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if err := store.CheckTasksPage(limit); err != nil {
		return nil, err
	}
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.p + "/locks"); return k, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	for i, k := range kids {
		kids[i] = unesc(k)
	}
	return store.TasksPage(kids, after, limit), nil
}

var _ store.SessionLeases = (*Store)(nil)

// LeasesEndWithSession is true: a grant is an ephemeral node, deleted when the session ends
// (store.SessionLeases).
func (s *Store) LeasesEndWithSession() bool { return true }

// Lost returns a channel closed when l's lock node is deleted or the session disconnects.
func (s *Store) Lost(l store.Lease) <-chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	path, down := s.paths[l.Token], s.down
	s.mu.Unlock()
	go func() {
		defer close(ch)
		if path == "" {
			return
		}
		for {
			ok, _, ev, err := s.c.ExistsW(path)
			if err != nil || !ok {
				return
			}
			select {
			case e := <-ev:
				// A watch fires on any change to the node, and every renewal rewrites it (its
				// mtime carries the TTL): only a deletion, or a watch the server dropped
				// (session gone), means the lease is lost. Anything else re-arms the watch.
				if e.Type == zk.EventNodeDeleted || e.Type == zk.EventNotWatching {
					return
				}
			case <-down:
				return
			}
		}
	}()
	return ch
}

// forget drops what this store remembers of the lock node of token.
func (s *Store) forget(token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.paths, token)
	delete(s.holders, token)
}
