package zk

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// authDSN is the test server with digest authentication and a chroot (scripts/testenv/zk.sh):
// zk://once:PASSWORD@127.0.0.1:PORT/apps/once-test.
func authDSN(tb testing.TB) string { return storetest.ServerDSN(tb, "ONCE_TEST_ZK_AUTH", "zk-auth") }

// TestAuthConformance: the suite with digest authentication, under a chroot.
func TestAuthConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{DSN: func(tb testing.TB) string { return storetest.WithPrefix(tb, authDSN(tb)) }})
}

// rawConn is a session of go-zookeeper's own, with digest credentials when auth is not "".
func rawConn(t *testing.T, servers []string, auth string) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(30 * time.Second)
	for ok := false; !ok; {
		select {
		case e := <-ev:
			ok = e.State == zk.StateHasSession
		case <-deadline:
			t.Fatal("no ZooKeeper session within 30s")
		}
	}
	if auth != "" {
		if err := c.AddAuth("digest", []byte(auth)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestAuthACL: the nodes of a prefix opened with a user live under the chroot, and a session
// without the user's credentials (none, or a wrong password) can neither delete a held lease's
// node, nor write the fence or a ledger document, nor add a contender; once with the wrong
// password fails Open with one line.
func TestAuthACL(t *testing.T) {
	dsn := storetest.WithPrefix(t, authDSN(t))
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.p, cfg.Chroot+"/once/") {
		t.Fatalf("nodes under %s, want the chroot %s", s.p, cfg.Chroot)
	}
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "guarded", Holder: "h", RunID: "run1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "guarded", Slot: "s", RunID: "run1", Number: 1, Holder: "h", Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	dir := s.taskPath("guarded")
	kids, _, err := s.c.Children(dir)
	if err != nil || len(kids) != 1 {
		t.Fatalf("lock nodes of the task: %v, %v", kids, err)
	}
	lock, doc := dir+"/"+kids[0], s.docPath("guarded", "s")
	for _, who := range []struct{ name, auth string }{{"no credentials", ""}, {"a wrong password", cfg.User + ":wrong"}} {
		c := rawConn(t, cfg.Servers, who.auth)
		for _, op := range []struct {
			what string
			err  error
		}{
			{"delete the lease node", c.Delete(lock, -1)},
			{"write the fence", func() error { _, err := c.Set(dir, []byte("999999"), -1); return err }()},
			{"write the ledger document", func() error { _, err := c.Set(doc, []byte("{}"), -1); return err }()},
			{"delete the ledger document", c.Delete(doc, -1)},
			{"add a contender", func() error {
				_, err := c.Create(dir+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
				return err
			}()},
			{"read the lease", func() error { _, _, err := c.Get(lock); return err }()},
		} {
			if !errors.Is(op.err, zk.ErrNoAuth) {
				t.Errorf("a session with %s could %s: %v, want %v", who.name, op.what, op.err, zk.ErrNoAuth)
			}
		}
	}
	if _, err := s.Renew(ctx, l, time.Minute); err != nil {
		t.Fatalf("renew after the attempts: %v", err)
	}
	// doctor's findings dial the servers, not the servers with the chroot.
	fs, err := s.Inspect(ctx)
	for _, f := range fs {
		if strings.Contains(f.Message, "unknown port") || strings.Contains(f.Message, "lookup") {
			t.Errorf("Inspect with a chroot: %+v", f)
		}
	}
	if err != nil {
		t.Error(err)
	}
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(cfg.User, "sekrit-wrong")
	_, err = Open(ctx, u.String())
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "check user and password") ||
		strings.Contains(err.Error(), "sekrit") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open with a wrong password: %v", err)
	}
	t.Log(err)
}
