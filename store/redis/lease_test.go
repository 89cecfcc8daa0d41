package redis

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestGrantValue: the lease value a grant writes is grantValue's, byte for byte, for holders and
// run ids that JSON escapes (quotes, backslashes, control characters, '/', non-ASCII), and reads
// back as the grant; a renewal keeps that form, so that the release finds it with one GET.
func TestGrantValue(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	for i, h := range []string{"host:1", `a"b\c/d`, "tab\there\x01\x1f\x7f", "€ ünï", `\"`} {
		task := "job" + strconv.Itoa(i)
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: h, RunID: h + "-run", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		stored := func() string {
			t.Helper()
			v, err := s.c.Get(ctx, s.tkey(task, "lease")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid([]byte(v)) {
				t.Fatalf("holder %q: the lease value %q is not JSON", h, v)
			}
			return v
		}
		before, after := s.grantValue(l)
		if v, want := stored(), before+strconv.FormatInt(l.Expires.UnixMicro(), 10)+after; v != want {
			t.Fatalf("holder %q: lease value\n%s\nwant\n%s", h, v, want)
		}
		ls, err := s.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := find(ls, task); got.Holder != h || got.RunID != h+"-run" || got.Token != l.Token || !got.Acquired.Equal(l.Acquired) || !got.Expires.Equal(l.Expires) {
			t.Fatalf("holder %q: Leases has %+v, want %+v", h, got, l)
		}
		r, err := s.Renew(ctx, l, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		before, after = s.grantValue(r)
		if v, want := stored(), before+strconv.FormatInt(r.Expires.UnixMicro(), 10)+after; v != want || r.Holder != h || r.Token != l.Token {
			t.Fatalf("holder %q: renewed lease %+v, value\n%s\nwant\n%s", h, r, v, want)
		}
		if err := s.Release(ctx, r); err != nil {
			t.Fatalf("holder %q: release after renew: %v", h, err)
		}
		if n := s.c.Exists(ctx, s.tkey(task, "lease")).Val(); n != 0 {
			t.Fatalf("holder %q: the lease key outlived the release", h)
		}
	}
}

// find is task's lease in ls, or the zero Lease.
func find(ls []store.Lease, task string) store.Lease {
	for _, l := range ls {
		if l.Task == task {
			return l
		}
	}
	return store.Lease{}
}

// TestReleaseOtherForms: a grant whose value is not the form this once writes — an older once's
// (cjson's key order, no epoch) — is released, renewed and refused by decoding it, as before; a
// value of the same token and holder but another epoch is not released by the value alone.
func TestReleaseOtherForms(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tok := strconv.FormatInt(l.Token, 10)
	a, x := strconv.FormatInt(l.Acquired.UnixMicro(), 10), strconv.FormatInt(l.Expires.UnixMicro(), 10)
	old := `{"x":"` + x + `","r":"r","h":"h","a":"` + a + `","t":"` + tok + `"}`
	if err := s.c.Set(ctx, s.tkey("job", "lease"), old, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, store.Lease{Task: "job", Holder: "other", Token: l.Token}, time.Minute); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("renew of an older form by another holder: %v", err)
	}
	r, err := s.Renew(ctx, l, time.Minute)
	if err != nil || r.Token != l.Token || r.Holder != "h" {
		t.Fatalf("renew of an older form: %+v, %v", r, err)
	}
	if err := s.Release(ctx, store.Lease{Task: "job", Holder: "other", Token: l.Token, Acquired: l.Acquired, Expires: l.Expires}); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("release of an older form by another holder: %v", err)
	}
	if err := s.Release(ctx, r); err != nil {
		t.Fatalf("release of an older form: %v", err)
	}
	// Another epoch's value of this very grant: the value alone does not say it is current, and
	// check() finds the counter's epoch is this client's (it is): released by decoding.
	l, err = s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before, after := s.grantValue(l)
	other := before + strconv.FormatInt(l.Expires.UnixMicro(), 10) + `","e":"other-epoch"}`
	if after == `","e":"other-epoch"}` {
		t.Fatal("the test's epoch is the store's")
	}
	if err := s.c.Set(ctx, s.tkey("job", "lease"), other, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.c.HSet(ctx, s.tkey("job", "fence"), "e", "other-epoch").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); !errors.Is(err, ErrLedgerLost) {
		t.Fatalf("release under another epoch: %v, want ErrLedgerLost", err)
	}
}
