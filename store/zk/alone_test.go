package zk

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/store"
)

// TestAcquireAloneToken: an uncontended acquire of a task made before takes its token from the
// task node's pzxid (publishAlone): the token is its lock node's czxid, the fence names it, and
// the grant expires a TTL after the node's mtime, as a contender judges it. The listing goes out
// beside the create from another goroutine and may reach the server first (then Acquire reads
// its node, the other path): the rounds go on until one took the fast path (its node rewritten:
// version 1), checking both.
func TestAcquireAloneToken(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute}
	fast := false
	for i := 0; !fast; i++ { // the first makes the task's node; the others find it
		if i == 200 {
			t.Fatal("no acquire of 200 took the fast path")
		}
		l, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		path, d, st, err := s.find(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token != st.Czxid || !l.Expires.Equal(ms(st.Mtime+d.TTL)) || !l.Acquired.Equal(ms(st.Ctime)) {
			t.Fatalf("round %d: lease %+v, node %s czxid %d ctime %d mtime %d ttl %d", i, l, path, st.Czxid, st.Ctime, st.Mtime, d.TTL)
		}
		if f, _, err := s.readFence(ctx, "job"); err != nil || f.latest != l.Token || len(f.seats) != 0 {
			t.Fatalf("round %d: fence %+v (%v), token %d", i, f, err, l.Token)
		}
		fast = st.Version == 1
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPublishAloneRepairs: a listing whose pzxid is not the lock node's czxid (a delete came
// between the create and the listing) publishes the czxid after all: the fence names the grant,
// never the delete's zxid.
func TestPublishAloneRepairs(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute}
	l, err := s.Acquire(ctx, req) // makes the task's node
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	dir := s.taskPath("job")
	data, _ := json.Marshal(nodeData{Holder: "h", RunID: "r", TTL: ttlMillis(req.TTL)})
	mine, err := s.c.Create(dir+"/n-", data, zk.FlagEphemeral|zk.FlagSequence, s.acl)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.c.Create(dir+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, s.acl)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.c.Delete(other, -1); err != nil {
		t.Fatal(err)
	}
	kids, dst, err := s.c.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := created{path: mine, data: data, kids: kids, dir: dst}
	if known, alone := c.listed(mine[strings.LastIndex(mine, "/")+1:]); known == nil || !alone {
		t.Fatalf("listing %v: known %v, alone %v", kids, known, alone)
	}
	_, st, err := s.c.Get(mine)
	if err != nil {
		t.Fatal(err)
	}
	if dst.Pzxid == st.Czxid {
		t.Fatalf("pzxid %d is the node's czxid: the delete did not come between", dst.Pzxid)
	}
	l, err = s.publishAlone(ctx, req, c, func(err error) (store.Lease, error) { return store.Lease{}, err })
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != st.Czxid {
		t.Fatalf("token %d, node's czxid %d (pzxid %d)", l.Token, st.Czxid, dst.Pzxid)
	}
	if f, _, err := s.readFence(ctx, "job"); err != nil || f.latest != st.Czxid {
		t.Fatalf("fence %+v (%v), want %d", f, err, st.Czxid)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// TestListedAloneAboveFence: a listing with our node alone is taken for the token only while the
// task node's pzxid is above its mzxid (the fence's last write, above every token published): a
// pzxid at or below it, which a correct server never gives with our node alone, sends Acquire
// to read our node.
func TestListedAloneAboveFence(t *testing.T) {
	for _, c := range []struct {
		pzxid, mzxid int64
		alone        bool
	}{{10, 9, true}, {10, 10, false}, {7, 10, false}} {
		cr := created{kids: []string{"n-0000000003"}, dir: &zk.Stat{Pzxid: c.pzxid, Mzxid: c.mzxid}}
		if known, alone := cr.listed("n-0000000003"); known == nil || alone != c.alone {
			t.Errorf("pzxid %d mzxid %d: known %v alone %v, want %v", c.pzxid, c.mzxid, known, alone, c.alone)
		}
	}
}
