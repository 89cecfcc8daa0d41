package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestFrozenOnceCannotOutliveItsLease: a once process that stops running (SIGSTOP here; a
// debugger, a stall) cannot stop its command itself, and its lease runs out in the store. The
// supervision shim's fence kills the command by the lease's stop-by instant — before the store
// can give the lease to another holder — on every store; the run that takes over then finds the
// slot's attempt unknown, never two commands at once.
func TestFrozenOnceCannotOutliveItsLease(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn := b.isolated()
		e := newEnv(t)
		if err := os.MkdirAll(e.home, 0o700); err != nil {
			t.Fatal(err)
		}
		e.vars = append(e.vars, "ONCE_STORE="+dsn)
		ctx := context.Background()
		s, err := store.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const task = "frozen-holder"
		dir := t.TempDir()
		a, cmdPid := startOnce(t, e, dir, "--task", task, "--slot", "s1", "--holder", "hostA", "--ttl", "6s")
		if b.name == "sqlite" {
			freezeOutsideWrite(t, a.Process.Pid, strings.TrimPrefix(b.dsn, "sqlite://"))
		} else if err := syscall.Kill(a.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen := time.Now()
		defer func() { syscall.Kill(a.Process.Pid, syscall.SIGCONT); a.Wait() }()
		// A contender asks the store for the lease all along: whenever the store grants it, the
		// frozen holder's command must be dead already.
		var died, granted time.Duration
		for deadline := time.Now().Add(15 * time.Second); granted == 0; {
			if died == 0 && !alive(cmdPid) {
				died = time.Since(frozen)
			}
			l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "contender", RunID: "contender", TTL: time.Second})
			switch {
			case err == nil:
				granted = time.Since(frozen)
				if alive(cmdPid) {
					t.Fatalf("the store gave the lease to another holder %s after the freeze while the frozen once's command %d still ran", granted, cmdPid)
				}
				if err := s.Release(ctx, l); err != nil {
					t.Fatal(err)
				}
			case !errors.Is(err, store.ErrBusy):
				t.Fatal(err)
			case time.Now().After(deadline):
				t.Fatal("no other holder got the lease within 15 s of the freeze")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if died == 0 {
			t.Fatal("the command died only as the lease was granted elsewhere")
		}
		t.Logf("%s: the shim killed the command %s after its once was frozen (ttl 6s: the fence is a sixth of it, 1 s, before the store can grant the lease); the store granted the lease elsewhere at %s",
			b.name, died.Round(time.Millisecond), granted.Round(time.Millisecond))
		if _, err := os.Stat(filepath.Join(dir, "signals")); err == nil {
			t.Log("the command got SIGTERM first")
		}
		// Another host takes over and finds the slot's attempt unknown: a person decides.
		e2 := newEnv(t)
		if err := os.MkdirAll(e2.home, 0o700); err != nil {
			t.Fatal(err)
		}
		e2.vars = append(e2.vars, "ONCE_STORE="+dsn)
		r := e2.run("run", "--task", task, "--slot", "s1", "--holder", "hostB", "--", "true")
		if r.code != 76 {
			t.Fatalf("hostB: exit %d, want 76 (the frozen holder's attempt is unknown: review)\n%s", r.code, r.stderr)
		}
	})
}
