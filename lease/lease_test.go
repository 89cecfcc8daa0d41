package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

func open(t *testing.T) (store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "once.db")
	s, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func req(ttl time.Duration) store.AcquireRequest {
	return store.AcquireRequest{Task: "t", Holder: "h1", RunID: "r1", TTL: ttl}
}

func TestRenewalKeepsTheLeasePastItsTTL(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	// 1.5 s: a 600 ms lease lost its renewal window (400 ms) to one slow fsync under a loaded
	// fresh-clone run. Slept past two TTLs.
	l, err := lease.Acquire(ctx, s, req(1500*time.Millisecond), 0)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Info().Expires
	time.Sleep(3500 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	default:
	}
	if !l.Info().Expires.After(first) {
		t.Fatal("expiry did not move: no renewal")
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h2", TTL: time.Second}); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("second holder: %v, want busy", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h2", TTL: time.Second}); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestWaitAcquiresWhenTheHolderReleases(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	g, err := s.Acquire(ctx, req(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); s.Release(ctx, g) }()
	start := time.Now()
	l, err := lease.Acquire(ctx, s, store.AcquireRequest{Task: "t", Holder: "h2", TTL: time.Second}, 5*time.Second)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	defer l.Release(ctx)
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("acquired after %s", d)
	}
	if l.Token() <= g.Token {
		t.Errorf("token %d not above %d", l.Token(), g.Token)
	}
}

func TestWaitGivesUpWithBusy(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	if _, err := s.Acquire(ctx, req(time.Minute)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := lease.Acquire(ctx, s, store.AcquireRequest{Task: "t", Holder: "h2", TTL: time.Second}, 400*time.Millisecond)
	var busy *store.BusyError
	if !errors.As(err, &busy) || busy.Lease.Holder != "h1" {
		t.Fatalf("err %v, want BusyError naming h1", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 2*time.Second {
		t.Errorf("gave up after %s, want about 400ms", d)
	}
}

// A store that stops answering (another process holds SQLite's write lock): the lease is declared
// lost while a third of the TTL is still left, before the store could grant it to anyone else.
func TestLostBeforeExpiryWhenRenewalsFail(t *testing.T) {
	s, path := open(t)
	ctx := context.Background()
	ttl := 1500 * time.Millisecond
	l, err := lease.Acquire(ctx, s, req(ttl), 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // one renewal
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * ttl):
		t.Fatal("not lost while the store was unwritable")
	}
	lostAt := time.Now()
	var exp int64
	if err := conn.QueryRowContext(ctx, "SELECT expires_at FROM leases WHERE task = 't'").Scan(&exp); err != nil {
		t.Fatal(err)
	}
	if left := time.UnixMicro(exp).Sub(lostAt); left < ttl/4 {
		t.Fatalf("declared lost only %s before expiry; want at least ttl/4", left)
	}
	if !errors.Is(l.Err(), lease.ErrLost) {
		t.Errorf("Err() = %v", l.Err())
	}
	conn.ExecContext(ctx, "ROLLBACK")
	if err := l.Release(ctx); err != nil {
		t.Errorf("release of a lost lease: %v", err)
	}
}

// After another holder has taken over an expired lease, renewal is refused and the loss is immediate.
func TestLostWhenAnotherHolderTookOver(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	l, err := lease.Acquire(ctx, s, req(900*time.Millisecond), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a paused keeper: forge a takeover by releasing the grant behind the keeper's back,
	// then acquiring it as someone else.
	if err := s.Release(ctx, l.Info()); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h2", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("not lost after takeover")
	}
	if !errors.Is(l.Err(), store.ErrNotHeld) {
		t.Errorf("Err() = %v, want ErrNotHeld inside", l.Err())
	}
	l.Release(ctx)
	if got, _ := s.Leases(ctx); len(got) != 1 || got[0].Token != g2.Token {
		t.Errorf("the new holder's lease was disturbed: %+v", got)
	}
}

// A writer frozen inside a write (here: the SQLite writers' queue held by someone who never lets
// go) does not hold a waiter past its --wait: the store call is bounded by the wait, never below
// store.ConnectTimeout, and fails closed with ErrUnavailable; without the bound it would take
// busy_timeout (10 s).
func TestWaitBoundsAStalledStore(t *testing.T) {
	s, path := open(t)
	if _, err := s.Acquire(context.Background(), req(time.Minute)); err != nil {
		t.Fatal(err) // the queue file exists once the store has written
	}
	q, err := os.OpenFile(filepath.Join(filepath.Dir(path), ".once.db.queue"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := unix.Flock(int(q.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ wait, want time.Duration }{{3 * time.Second, 3 * time.Second}, {100 * time.Millisecond, store.ConnectTimeout}} {
		start := time.Now()
		_, err := lease.Acquire(context.Background(), s, store.AcquireRequest{Task: "u", Holder: "h2", RunID: "r2", TTL: time.Minute}, c.wait)
		took := time.Since(start)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("wait %s: %v, want ErrUnavailable", c.wait, err)
		}
		if took < c.want-50*time.Millisecond || took > c.want+time.Second {
			t.Errorf("wait %s: gave up after %s, want about %s", c.wait, took, c.want)
		}
	}
}

// A grant that says it lasts less than the TTL asked (store.ShortGrant: etcd on an etcd lease
// renewed moments before) is vouched for only that long, and never less than ShortGrant short; one
// that says the TTL, for the TTL.
func TestDeadlineOfAShortGrant(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	const ttl = time.Minute
	for _, c := range []struct{ says, want time.Duration }{
		{ttl, ttl}, {ttl - 20*time.Millisecond, ttl - 20*time.Millisecond}, {time.Millisecond, ttl - store.ShortGrant}, {-time.Second, ttl - store.ShortGrant},
	} {
		before := time.Now()
		l, err := lease.Take(ctx, s, ttl, 0, func(ctx context.Context) (store.Lease, error) {
			g, err := s.Acquire(ctx, req(ttl))
			g.Expires = g.Acquired.Add(c.says)
			return g, err
		})
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if d := l.Deadline(); d.Before(before.Add(c.want)) || d.After(after.Add(c.want)) {
			t.Errorf("granted %s: deadline %s after the acquire began, want %s", c.says, d.Sub(before), c.want)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// shortRenewals is a store whose renewals say they grant half the TTL (a store whose clock stepped
// back since the acquire: Expires - Acquired shrinks).
type shortRenewals struct{ store.Leaser }

func (s shortRenewals) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	g, err := s.Leaser.Renew(ctx, l, ttl)
	g.Expires = g.Acquired.Add(ttl / 2)
	return g, err
}

// What a renewal's times say does not shorten the deadline: a renewal that succeeded vouches for
// the TTL from its send time.
func TestRenewalTimesDoNotShortenTheDeadline(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	l, err := lease.Acquire(ctx, shortRenewals{s}, req(1500*time.Millisecond), 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lease lost because renewals kept failing says why they failed: the loss wraps the last
// renewal's error (here the store closed under it: ErrUnavailable). It said only "could not renew
// it for 2s", and the attempt's note carried no more.
func TestLossNamesWhyRenewalsFailed(t *testing.T) {
	s, _ := open(t)
	l, err := lease.Acquire(context.Background(), s, req(1500*time.Millisecond), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	s.Close()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost 5s after the store was closed")
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Err = %v, want ErrLost wrapping the renewals' ErrUnavailable (the store is closed)", err)
	}
}

// A TTL below MinTTL is refused as bad input (store.ErrInvalid), before the store is asked: a
// 1 ms lease renewed every 0.3 ms; a zero or negative one was an error matching no sentinel.
func TestShortTTLRefused(t *testing.T) {
	for _, ttl := range []time.Duration{-time.Second, 0, time.Millisecond, lease.MinTTL - 1} {
		if _, err := lease.Acquire(context.Background(), nil, req(ttl), 0); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ttl %s: %v; want store.ErrInvalid", ttl, err)
		}
	}
}

// A Release that failed (its ctx ended) is tried again by the next one: it returned nil at once
// and left the grant held in the store until its expiry, although it had released nothing.
func TestReleaseAgainAfterAFailedOne(t *testing.T) {
	s, _ := open(t)
	l, err := lease.Acquire(context.Background(), s, req(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Release(ended); err == nil {
		t.Fatal("Release with an ended ctx returned nil")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if ls, err := s.Leases(context.Background()); err != nil || len(ls) != 0 {
		t.Fatalf("leases %+v %v after Release returned nil: want none", ls, err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("third Release: %v", err)
	}
}
