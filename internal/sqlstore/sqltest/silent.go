package sqltest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/chaos"
	"github.com/once-run/once/store"
)

// silentBound is the call_timeout SilentConnection gives the store.
const silentBound = 2 * time.Second

// SilentConnection checks the call bound (sqlstore.DefaultCallTimeout, the DSN's call_timeout): with
// every byte to and from the server dropped, on the connections open and on new ones (a partition,
// a NAT that forgot them, a frozen server), a call whose ctx has no deadline — the lease's take and
// the slot's read, as `once run` without --wait makes them — returns unavailable within the bound,
// naming call_timeout, both on a pooled connection and on a new one (its handshake); and the store
// answers again once the path heals. Without the bound each call waited until the kernel gave up.
func SilentConnection(t *testing.T, dsn string, open Opener) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := chaos.NewProxy(ctx, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	q := u.Query()
	q.Set("call_timeout", silentBound.String())
	u.RawQuery = q.Encode()
	s, _, err := open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := store.AcquireRequest{Task: "silent", Holder: "h", RunID: "r1", TTL: time.Minute}
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	silent(t, "take on a pooled connection", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, store.AcquireRequest{Task: "silent-2", Holder: "h", RunID: "r2", TTL: time.Minute})
		return err
	})
	silent(t, "read on a new connection", func(ctx context.Context) error {
		_, err := s.Slot(ctx, "silent", "")
		return err
	})

	p.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.Release(context.Background(), l)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not answer within 30 s of the path healing: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// silent runs call with a context without deadline and checks it ends unavailable within the bound
// (with room for a loaded machine), its error naming call_timeout.
func silent(t *testing.T, what string, call func(ctx context.Context) error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call(context.Background()) }()
	select {
	case err := <-done:
		took := time.Since(start)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "call_timeout") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s on a silent connection: %v; want one line, unavailable, naming call_timeout", what, err)
		}
		if took < silentBound/2 || took > silentBound+5*time.Second {
			t.Errorf("%s on a silent connection ended after %v; want about the call_timeout of %v", what, took.Round(time.Millisecond), silentBound)
		}
		t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s on a silent connection did not end within 30 s (call_timeout %v)", what, silentBound)
	}
}
