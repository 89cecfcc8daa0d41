package sqltest

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// ConcurrentMigrate: 50 clients with their own pools open one empty prefix (dsn) at once; all
// succeed, and exactly one of them then acquires the same task.
func ConcurrentMigrate(t *testing.T, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	stores := make(chan store.Store, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := store.Open(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			stores <- s
		}()
	}
	wg.Wait()
	close(errs)
	close(stores)
	for err := range errs {
		t.Errorf("open: %v", err)
	}
	var tokens []int64
	for s := range stores {
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "m", Holder: "h", RunID: "r", TTL: time.Minute})
		if err == nil {
			tokens = append(tokens, l.Token)
		} else if !errors.Is(err, store.ErrBusy) {
			t.Errorf("acquire: %v", err)
		}
		s.Close()
	}
	if len(tokens) != 1 {
		t.Errorf("50 clients acquired %d leases, want 1", len(tokens))
	}
}

// BadDSN: opening good (the test server's DSN) with a wrong password, host, database, prefix,
// parameter or no database fails with the right sentinel and a one-line message that names what is
// wrong (and the host, when the server was asked) without the password.
func BadDSN(t *testing.T, good string) {
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	user := u.User.Username()
	with := func(f func(u *url.URL)) string {
		c := *u
		f(&c)
		return c.String()
	}
	cases := []struct {
		name, dsn, want string
		sentinel        error
	}{
		{"password", with(func(u *url.URL) { u.User = url.UserPassword(user, "wrong-"+pw) }), "password", store.ErrUnavailable},
		{"host", with(func(u *url.URL) { u.Host = "127.0.0.1:1" }), "127.0.0.1:1", store.ErrUnavailable},
		{"database", with(func(u *url.URL) { u.Path = "/no_such_db" }), "no_such_db", store.ErrUnavailable},
		{"prefix", with(func(u *url.URL) { u.RawQuery = "prefix=Bad-Name" }), "prefix", store.ErrBadDSN},
		{"param", with(func(u *url.URL) { u.RawQuery = "no_such_setting=1" }), "no_such_setting", store.ErrBadDSN},
		{"nodb", with(func(u *url.URL) { u.Path = "" }), "database", store.ErrBadDSN},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := store.Open(ctx, c.dsn)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", store.Redact(c.dsn))
			}
			msg := err.Error()
			t.Logf("%s (%v)", msg, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, c.sentinel) {
				t.Errorf("error %q does not wrap %v", msg, c.sentinel)
			}
			if pw != "" && strings.Contains(msg, pw) {
				t.Errorf("error %q contains the password", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is more than one line", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not mention %q", msg, c.want)
			}
			if c.sentinel == store.ErrUnavailable && !strings.Contains(msg, u.Hostname()) {
				t.Errorf("error %q does not name the host", msg)
			}
		})
	}
}

// Restart: the server restarts (by the script in the environment variable ctlEnv, which
// ./scripts/test sets for its private servers) while a lease on dsn is held. The store reconnects
// by itself: renew after the restart succeeds (the lease row is durable and the TTL has not run
// out), and the token survives.
func Restart(t *testing.T, ctlEnv, dsn string) {
	ctl := os.Getenv(ctlEnv)
	if ctl == "" {
		t.Skipf("%s is not set (a server of your own); restart test needs the private server", ctlEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h", RunID: "run", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := storetest.Outage(t, ctl)
	// While it is down: a clean ErrUnavailable within the retry budget, not a hang.
	storetest.RenewWhileDown(t, ctx, s, l, 30*time.Second, 5*time.Second)
	start()
	l2, err := s.Renew(ctx, l, 30*time.Second)
	if err != nil {
		t.Fatalf("renew after restart: %v", err)
	}
	if l2.Token != l.Token || !l2.Expires.After(l.Expires) {
		t.Fatalf("renew after restart = %+v, from %+v", l2, l)
	}
	if err := s.Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
}
