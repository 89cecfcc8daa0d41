package chaos

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a byte and reads it back within d; it reports what happened.
func roundTrip(c net.Conn, d time.Duration) string {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return "write error"
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	switch {
	case err == nil:
		return "echo"
	case isTimeout(err):
		return "silence"
	}
	return "closed"
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestProxyModes(t *testing.T) {
	p, err := NewProxy(context.Background(), echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	old := dial()
	if got := roundTrip(old, time.Second); got != "echo" {
		t.Fatalf("forward: %s", got)
	}
	p.Cut()
	if got := roundTrip(old, time.Second); got != "closed" {
		t.Fatalf("cut, open connection: %s, want closed", got)
	}
	if got := roundTrip(dial(), time.Second); got != "closed" {
		t.Fatalf("cut, new connection: %s, want closed", got)
	}
	p.Heal()
	live := dial()
	if got := roundTrip(live, time.Second); got != "echo" {
		t.Fatalf("healed: %s", got)
	}
	p.Blackhole()
	if got := roundTrip(live, 300*time.Millisecond); got != "silence" {
		t.Fatalf("blackhole, open connection: %s, want silence", got)
	}
	if got := roundTrip(dial(), 300*time.Millisecond); got != "silence" {
		t.Fatalf("blackhole, new connection: %s, want silence", got)
	}
	p.Heal()
	if got := roundTrip(dial(), time.Second); got != "echo" {
		t.Fatalf("healed after blackhole: %s", got)
	}
}

// A client that hangs up (a holder killed with kill -9) must look the same to the server as
// without the proxy: the server reads EOF. Before this, the proxy kept the upstream connection
// open, so a MariaDB session killed mid-transaction held its row locks until wait_timeout and
// the next holders waited out innodb_lock_wait_timeout (50 s).
func TestProxyPassesClientHangUpToServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	eof := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			eof <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c) // returns nil at EOF
		eof <- err
	}()
	p, err := NewProxy(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("BEGIN")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case err := <-eof:
		if err != nil {
			t.Fatalf("server read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the client hang up")
	}
}

// Freeze holds every byte of open and new connections, closing none; Thaw delivers what it held
// on the same connections.
func TestProxyFreezeThaw(t *testing.T) {
	p, err := NewProxy(context.Background(), echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := roundTrip(old, time.Second); got != "echo" {
		t.Fatalf("forward: %s", got)
	}
	p.Freeze()
	if got := roundTrip(old, 300*time.Millisecond); got != "silence" {
		t.Fatalf("frozen, open connection: %s, want silence", got)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := roundTrip(fresh, 300*time.Millisecond); got != "silence" {
		t.Fatalf("frozen, new connection: %s, want silence", got)
	}
	p.Thaw()
	for name, c := range map[string]net.Conn{"open": old, "new": fresh} {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b := make([]byte, 2) // the byte held by the freeze, then this one
		if _, err := c.Write([]byte{'y'}); err != nil {
			t.Fatalf("thawed, %s connection: write: %v", name, err)
		}
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "xy" {
			t.Fatalf("thawed, %s connection: read %q, %v; want \"xy\"", name, b, err)
		}
	}
}
