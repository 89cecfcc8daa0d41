package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// The Redis Cluster and Sentinel servers ./scripts/testenv/redis_{cluster,sentinel}.sh start.
func clusterDSN(tb testing.TB) string {
	return storetest.ServerDSN(tb, "ONCE_TEST_REDIS_CLUSTER", "redis-cluster")
}
func sentinelDSN(tb testing.TB) string {
	return storetest.ServerDSN(tb, "ONCE_TEST_REDIS_SENTINEL", "redis-sentinel")
}

// TestClusterConformance: the suite against a 3-master Redis Cluster. Every script's keys are one
// task's (one hash tag), and a prefix's tasks spread over the masters.
func TestClusterConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{DSN: func(tb testing.TB) string { return storetest.WithPrefix(tb, clusterDSN(tb)) }})
}

// TestSentinelConformance: the suite against the master of a Sentinel set, with ?wait=1.
func TestSentinelConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{DSN: func(tb testing.TB) string {
		return storetest.WithPrefix(tb, sentinelDSN(tb)) + "&wait=1"
	}})
}

// TestClusterSpread: one prefix's tasks live on several masters, and Leases, Tasks and history
// read them all.
func TestClusterSpread(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, storetest.WithPrefix(t, clusterDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	masters := map[string]bool{}
	const n = 24
	for i := 0; i < n; i++ {
		task := "spread-" + string(rune('a'+i))
		if _, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "r" + task, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		node, err := s.node(ctx, s.tkey(task, "lease"))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Errorf("%d tasks on %d masters, want them spread", n, len(masters))
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != n {
		t.Fatalf("Leases = %d, %v; want %d", len(ls), err, n)
	}
	fs, err := s.Inspect(ctx)
	if err != nil || !hasFinding(fs, "topology", "3 masters") {
		t.Errorf("Inspect = %+v, %v; want the topology", fs, err)
	}
}

func hasFinding(fs []store.Finding, check, text string) bool {
	for _, f := range fs {
		if f.Check == check && strings.Contains(f.Message, text) {
			return true
		}
	}
	return false
}

// TestSentinelFailover: SENTINEL FAILOVER moves the master to the replica; the same store object
// finds the new master, and with ?wait=1 what it wrote before (the ledger, the fencing counter)
// survived: the slot is done and the next token is higher.
func TestSentinelFailover(t *testing.T) {
	dsn := storetest.WithPrefix(t, sentinelDSN(t)) + "&wait=1"
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 3*time.Minute)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "fo", Holder: "h", RunID: "run1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "fo", Slot: "s", RunID: "run1", Number: 1, Holder: "h", Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, "run1", l.Token, store.Outcome{State: store.Succeeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: cfg.Addrs[0], Username: cfg.SentinelUser, Password: cfg.SentinelPassword})
	defer sc.Close()
	before, err := sc.GetMasterAddrByName(ctx, cfg.Master).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A failover needs the replica to be known and healthy to the sentinel: retry while it says not.
	for {
		err := sc.Failover(ctx, cfg.Master).Err()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var after []string
	for {
		after, err = sc.GetMasterAddrByName(ctx, cfg.Master).Result()
		if err == nil && after[1] != before[1] {
			t.Logf("master moved from %s to %s", before[1], after[1])
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the master did not move from %v: %v", before, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// With ?wait=1 a grant needs the old master back as the new one's replica. That is the
	// sentinels' work (about 10 s after the switch, then a sync), not the store's: when a loaded
	// machine makes them late, the test does what an operator would (REPLICAOF), so what it checks
	// stays the store's part: the same object follows the new master and nothing was lost.
	oldM, newM := net.JoinHostPort(before[0], before[1]), net.JoinHostPort(after[0], after[1])
	if !replicaOnline(ctx, cfg, newM, 60*time.Second) {
		t.Logf("the sentinels did not make %s a replica of %s within 60s; doing it here\n%s", oldM, newM, sentinelState(ctx, cfg, oldM, newM))
		c := goredis.NewClient(&goredis.Options{Addr: oldM, Password: cfg.Opts.Password})
		err := c.ReplicaOf(ctx, after[0], after[1]).Err()
		c.Close()
		if err != nil || !replicaOnline(ctx, cfg, newM, 60*time.Second) {
			t.Fatalf("no replica online at %s (REPLICAOF: %v)\n%s", newM, err, sentinelState(ctx, cfg, oldM, newM))
		}
	}
	// The client follows the new master: calls may fail while it switches, then work.
	var l2 store.Lease
	last := ""
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l2, err = s.Acquire(actx, store.AcquireRequest{Task: "fo", Holder: "h2", RunID: fmt.Sprintf("run2-%d", i), TTL: time.Minute})
		cancel()
		if err == nil {
			break
		}
		if e := err.Error(); e != last {
			t.Logf("acquire after the failover: %v", err)
			last = e
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("acquire after the failover: %v\n%s", err, sentinelState(ctx, cfg, oldM, newM))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if l2.Token <= l.Token {
		t.Errorf("token after the failover %d, before %d: the fencing counter went back", l2.Token, l.Token)
	}
	st, err := s.Slot(ctx, "fo", "s")
	if err != nil || st.Last == nil || st.Last.RunID != "run1" || st.Last.State != store.Succeeded {
		t.Errorf("slot after the failover: %+v, %v; want run1 done", st, err)
	}
	if err := s.Release(ctx, l2); err != nil {
		t.Error(err)
	}
}

// replicaOnline waits up to d for the master at addr to report a replica online and caught up.
func replicaOnline(ctx context.Context, cfg Config, addr string, d time.Duration) bool {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Password: cfg.Opts.Password})
	defer c.Close()
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:master") && strings.Contains(info, ",state=online,") {
			return true
		}
	}
	return false
}

// sentinelState is what a failover test that failed shows: both servers' replication state, and
// the sentinels' and servers' logs when the test command started them (under $ONCE_TEST_TMP).
func sentinelState(ctx context.Context, cfg Config, addrs ...string) string {
	var b strings.Builder
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, Password: cfg.Opts.Password})
		info, err := c.Info(ctx, "replication").Result()
		c.Close()
		fmt.Fprintf(&b, "--- %s INFO replication (%v)\n%s\n", a, err, info)
	}
	if dir := os.Getenv("ONCE_TEST_TMP"); dir != "" {
		logs, _ := filepath.Glob(filepath.Join(dir, "redis-sentinel", "*", "server.log"))
		for _, f := range logs {
			data, _ := os.ReadFile(f)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", f, strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
	}
	return b.String()
}

func TestModesDSN(t *testing.T) {
	cfg, err := ParseDSN("redis+cluster://u:pw@a:7000,b,[::1]:7002/?prefix=blue&dial_timeout=2s")
	if err != nil || cfg.Mode != ModeCluster || strings.Join(cfg.Addrs, " ") != "a:7000 b:6379 [::1]:7002" ||
		cfg.Opts.Username != "u" || cfg.Opts.Password != "pw" || cfg.Prefix != "blue" || cfg.Opts.DialTimeout != 2*time.Second {
		t.Fatalf("cluster: %+v, %v", cfg, err)
	}
	cfg, err = ParseDSN("rediss+sentinel://:pw@s1,s2:26380/3?master=mymaster&sentinel_password=spw&wait=1&wait_timeout=5s")
	if err != nil || cfg.Mode != ModeSentinel || strings.Join(cfg.Addrs, " ") != "s1:26379 s2:26380" || cfg.Master != "mymaster" ||
		cfg.SentinelPassword != "spw" || cfg.Opts.Password != "pw" || cfg.Opts.DB != 3 || cfg.Opts.TLSConfig == nil ||
		cfg.Opts.TLSConfig.ServerName != "" || cfg.Wait != 1 || cfg.WaitTimeout != 5*time.Second || cfg.Opts.ReadTimeout < 6*time.Second {
		t.Fatalf("sentinel: %+v, %v", cfg, err)
	}
	for _, c := range []struct{ dsn, want string }{
		{"redis+cluster://a:1,,b:2", "stray ','"},
		{"redis+cluster://a:1/2", "database 0 only"},
		{"redis+cluster://u:sekrit@a:99999", "is not a port"},
		{"redis+cluster://::1:5", "brackets"},
		{"redis+sentinel://a:1/0", "?master=NAME"},
		{"redis+sentinel://a:1/x?master=m", "database"},
		{"redis://h/0?master=m", "only for Sentinel"},
		{"redis+cluster://h?master=m", "only for Sentinel"},
		{"redis+cluster://h?addr=x:1", "host part"},
		{"redis+sentinel://u:sekrit@h/0?master=m&sentinel_password=sekrit&nosuch=1", "nosuch"},
		{"redis+sentinel://h/0?master=m&sentinel_password=sekrit&dial_timeout=soon", "dial_timeout"},
		{"redis://h?wait=-1", `"wait"`},
		{"redis://h?wait_timeout=2h", `"wait_timeout"`},
	} {
		_, err := ParseDSN(c.dsn)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sekrit") ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseDSN(%q) = %v; want ErrBadDSN mentioning %q", c.dsn, err, c.want)
		}
	}
	if r := store.Redact("redis+sentinel://u:sekrit@h/0?master=m&sentinel_password=sekrit"); strings.Contains(r, "sekrit") {
		t.Errorf("Redact = %q", r)
	}
}

// TestSentinelUnknownMaster: a master name the sentinels do not monitor is one clear line.
func TestSentinelUnknownMaster(t *testing.T) {
	dsn := strings.Replace(sentinelDSN(t), "master=mymaster", "master=nosuch", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Open(ctx, dsn+"&dial_timeout=2s")
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open with an unknown master: %v", err)
	}
	t.Log(err)
}

// TestModesWrongPassword: a wrong password for the cluster's nodes or the Sentinel master fails
// Open with one line that says to check the credentials, without the password.
func TestModesWrongPassword(t *testing.T) {
	for name, dsn := range map[string]func(testing.TB) string{"cluster": clusterDSN, "sentinel": sentinelDSN} {
		u, err := url.Parse(dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("", "sekrit-wrong")
		_, err = Open(ctxT(t, 30*time.Second), u.String())
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "check user and password") ||
			strings.Contains(err.Error(), "sekrit") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s with a wrong password: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestWaitUnacknowledged: with ?wait=1 and no replica, a grant is not handed out: Acquire fails with
// one line naming the replicas that acknowledged, and the grant is released again (the task is not
// left busy); a ledger write stands but fails the same way.
func TestWaitUnacknowledged(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx := ctxT(t, time.Minute)
	w, err := Open(ctx, dsn+"&wait=1&wait_timeout=100ms")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.Acquire(ctx, store.AcquireRequest{Task: "w", Holder: "h", RunID: "r1", TTL: time.Minute})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged the lease grant") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("acquire without a replica: %v", err)
	}
	t.Log(err)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "w", Holder: "h2", RunID: "r2", TTL: time.Minute})
	if err != nil || l.Token != 2 {
		t.Fatalf("acquire after the unacknowledged grant: %+v, %v; want token 2 (token 1 spent, its grant released)", l, err)
	}
	_, err = w.Begin(ctx, store.Attempt{Task: "w", Slot: "s", RunID: "r2", Number: 1, Holder: "h2", Token: l.Token})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "replicas acknowledged the ledger write") {
		t.Fatalf("begin without a replica: %v", err)
	}
}

// TestSentinelPassword: the test script's sentinels require a password of their own, so the
// suite above runs through ?sentinel_password; a wrong one fails Open with a clear error that
// does not show it.
func TestSentinelPassword(t *testing.T) {
	dsn := sentinelDSN(t)
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SentinelPassword == "" {
		t.Skip("the sentinels of ONCE_TEST_REDIS_SENTINEL take no password (?sentinel_password)")
	}
	given := "sentinel_password=" + url.QueryEscape(cfg.SentinelPassword)
	wrong := strings.Replace(dsn, given, "sentinel_password=not-the-pw", 1)
	missing := strings.Replace(strings.Replace(dsn, "&"+given, "", 1), given+"&", "", 1)
	if wrong == dsn || missing == dsn {
		t.Fatalf("cannot replace the sentinel password in %s", store.Redact(dsn))
	}
	ctx := ctxT(t, time.Minute)
	for _, d := range []string{wrong, missing} {
		s, err := Open(ctx, d)
		if err == nil {
			s.Close()
		}
		if err == nil || strings.Contains(err.Error(), "not-the-pw") || !strings.Contains(err.Error(), "the sentinels refused the credentials") {
			t.Fatalf("%s: %v; want an error that says the sentinels refused, without the password", store.Redact(d), err)
		}
		t.Logf("%s: %v", store.Redact(d), err)
	}
}
