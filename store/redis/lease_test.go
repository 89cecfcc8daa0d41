package redis

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestGrantValue: the lease value a grant writes is grantValue's, byte for byte, for holders and
// run ids that JSON escapes (quotes, backslashes, '/', '<', '&', non-ASCII), and reads back as the
// grant; a renewal keeps that form, so that the release finds it with one GET. (Control characters
// are refused by Acquire: an older once's grants holding them are TestOddHoldersAcrossForms'.)
func TestGrantValue(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	for i, h := range []string{"host:1", `a"b\c/d`, "<tag>&amp;\u00a0", "€ ünï", `\"`} {
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

// The exclusive acquire and the renewal of the once before the lease value carried the epoch
// (928171c), as its scripts were: an older once beside this one on the same keys.
const (
	olderGrant = `
local function grant(n, cur)
  if n == 0 then redis.call('HSET', KEYS[1], 'e', ARGV[1], 'r', '1') end
  n = redis.call('HINCRBY', KEYS[1], 'n', 1)
  local t = now()
  local ttl = tonumber(ARGV[5])
  local v = cjson.encode({t = string.format('%d', n), h = ARGV[3], r = ARGV[4],
    a = string.format('%d', t), x = string.format('%d', t + ttl * 1000)})
  if cur then
    redis.call('SET', KEYS[2], v, 'PX', ttl)
  else
    redis.call('SET', KEYS[2], v, 'NX', 'PX', ttl)
  end
  redis.call('DEL', KEYS[4])
  return n, t
end
`
	olderAcquire = `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if cur then
  local c = cjson.decode(cur)
  if tonumber(c.t) > n then return redis.error_reply('LOST') end
  return {'BUSY', cur}
end
local t
n, t = grant(n, cur)
return {'OK', n, t}
`
	olderRenew = `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'NOTHELD'} end
local c = cjson.decode(cur)
if c.h ~= ARGV[3] or c.t ~= ARGV[4] or c.l then return {'NOTHELD'} end
local ttl = tonumber(ARGV[5])
c.x = string.format('%d', now() + ttl * 1000)
local v = cjson.encode(c)
redis.call('SET', KEYS[2], v, 'XX', 'PX', ttl)
return {'OK', v}
`
)

// TestOlderOnceBeside: grants of an older once (its value without the epoch, in cjson's order) are
// busy to this one, and renewed and released by it; this once's grants are busy to the older
// one, and still released by this one after the older renewed them (its form then: cjson's).
func TestOlderOnceBeside(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	acquire, renew := goredis.NewScript(check+olderGrant+olderAcquire), goredis.NewScript(check+olderRenew)
	older := func(holder string) ([]any, error) {
		return acquire.Run(ctx, s.c, s.taskKeys("job"), s.epoch, 0, holder, "run-"+holder, 60000, "0").Slice()
	}
	r, err := older("old")
	if err != nil || len(r) != 3 || r[0] != "OK" {
		t.Fatalf("older acquire: %v, %v", r, err)
	}
	l := store.Lease{Task: "job", Holder: "old", RunID: "run-old", Token: r[1].(int64),
		Acquired: time.UnixMicro(r[2].(int64)), Expires: time.UnixMicro(r[2].(int64) + 60000*1000)}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "new", RunID: "run-new", TTL: time.Minute}); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("acquire over an older once's grant: %v", err)
	}
	if l, err = s.Renew(ctx, l, time.Minute); err != nil {
		t.Fatalf("renew of an older once's grant: %v", err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatalf("release of an older once's grant: %v", err)
	}
	n, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "new", RunID: "run-new", TTL: time.Minute})
	if err != nil || n.Token != l.Token+1 {
		t.Fatalf("acquire after the older grant: %+v, %v", n, err)
	}
	if r, err := older("old2"); err != nil || len(r) != 2 || r[0] != "BUSY" {
		t.Fatalf("older acquire over this once's grant: %v, %v", r, err)
	} else if b, err := decodeLease("job", r[1]); err != nil || b.Token != n.Token || b.Holder != "new" {
		t.Fatalf("the busy value as an older once decodes it: %+v, %v", b, err)
	}
	// Only a grant's holder renews it, so an older once never renews this one's grant: this checks
	// that a value in cjson's form, as an older renewal writes it, releases too.
	rr, err := renew.Run(ctx, s.c, s.taskKeys("job"), s.epoch, n.Token, "new", strconv.FormatInt(n.Token, 10), 60000).Slice()
	if err != nil || rr[0] != "OK" {
		t.Fatalf("older renew of this once's grant: %v, %v", rr, err)
	}
	renewed, err := decodeLease("job", rr[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, renewed); err != nil {
		t.Fatalf("release of this once's grant in cjson's form: %v", err)
	}
	if ex := s.c.Exists(ctx, s.tkey("job", "lease")).Val(); ex != 0 {
		t.Fatal("the lease key outlived the release")
	}
}

// TestGrantBeforeRedis7: before Redis 7.0, SET with NX and GET is a syntax error, and grant's take
// falls back to a GET and a SET. Simulated by an option no Redis accepts beside NX (XX): a free
// acquire grants as the one SET does, a busy one (acquire and start) writes nothing and answers the
// live value, a replace takes over. An error the fallback cannot mend (WRONGTYPE: the pcall catches
// it too) fails the acquire, the fallback's or the real one, and the counter does not move.
func TestGrantBeforeRedis7(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	older := strings.Replace(grant, "'NX', 'GET'", "'NX', 'XX', 'GET'", 1)
	if older == grant {
		t.Fatal("grant has no SET NX GET")
	}
	acquire, start := goredis.NewScript(check+older+acquireLua), goredis.NewScript(check+older+startLua)
	run := func(sc *goredis.Script, req store.AcquireRequest, replace string) store.Lease {
		t.Helper()
		keys := s.taskKeys(req.Task)
		if sc == start {
			keys = append(keys, s.tkey(req.Task, "d:slot"), s.tkey(req.Task, "running"))
		}
		r, err := sc.Run(ctx, s.c, keys, s.grantArgs(req, replace)...).Slice()
		if err != nil {
			t.Fatalf("%s: %v", req.Holder, err)
		}
		l, err := s.granted(req, r, 0)
		if err != nil && !errors.Is(err, store.ErrBusy) {
			t.Fatalf("%s: %v", req.Holder, err)
		}
		return l
	}
	value := func() string { return s.c.Get(ctx, s.tkey("job", "lease")).Val() }
	counter := func() string { return s.c.HGet(ctx, s.tkey("job", "fence"), "n").Val() }
	want := func(l store.Lease) string {
		before, after := s.grantValue(l)
		return before + strconv.FormatInt(l.Expires.UnixMicro(), 10) + after
	}
	a := run(acquire, store.AcquireRequest{Task: "job", Holder: `a"/\`, RunID: "ra", TTL: time.Minute}, "0")
	if a.Token != 1 || value() != want(a) || counter() != "1" {
		t.Fatalf("free acquire: %+v, value %s, counter %s", a, value(), counter())
	}
	for _, sc := range []*goredis.Script{acquire, start} {
		if b := run(sc, store.AcquireRequest{Task: "job", Holder: "b", RunID: "rb", TTL: time.Minute}, "0"); b.Token != 0 || value() != want(a) || counter() != "1" {
			t.Fatalf("busy acquire: %+v, value %s, counter %s", b, value(), counter())
		}
	}
	c := run(acquire, store.AcquireRequest{Task: "job", Holder: "c", RunID: "rc", TTL: time.Minute}, "1")
	if c.Token != 2 || value() != want(c) || counter() != "2" {
		t.Fatalf("replace: %+v, value %s, counter %s", c, value(), counter())
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if d := run(start, store.AcquireRequest{Task: "job", Holder: "d", RunID: "rd", TTL: time.Minute}, "0"); d.Token != 3 || value() != want(d) {
		t.Fatalf("start: %+v, value %s", d, value())
	}
	s.c.Del(ctx, s.tkey("job", "lease"))
	s.c.HSet(ctx, s.tkey("job", "lease"), "not", "a string")
	req := store.AcquireRequest{Task: "job", Holder: "e", RunID: "re", TTL: time.Minute}
	if _, err := acquire.Run(ctx, s.c, s.taskKeys("job"), s.grantArgs(req, "0")...).Slice(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("the fallback's acquire over a hash: %v, want WRONGTYPE", err)
	}
	if _, err := s.Acquire(ctx, req); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("acquire over a hash: %v, want WRONGTYPE", err)
	}
	if counter() != "3" || s.c.Type(ctx, s.tkey("job", "lease")).Val() != "hash" {
		t.Fatalf("after the failed acquires: counter %s, lease key a %s", counter(), s.c.Type(ctx, s.tkey("job", "lease")).Val())
	}
}

// TestOddHoldersAcrossForms: holders and run ids of every byte (control characters, '"', '\', '/',
// DEL, bytes above 0x7f, invalid UTF-8, NUL) are written by jsonString so that cjson reads them back
// byte for byte: an older once's renewal, which compares cjson's decoding with the raw holder,
// renews this once's grant; and this once's release then finds the grant, in cjson's form, by
// decoding it (releaseScript). This once refuses the holders that are not printable UTF-8
// (store.AcquireRequest.Check: ErrInvalid); an older once or library caller may have written them,
// so their grants are taken by an older once's acquire instead, and still renewed and released.
func TestOddHoldersAcrossForms(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	acquire, renew := goredis.NewScript(check+olderGrant+olderAcquire), goredis.NewScript(check+olderRenew)
	for i, h := range []string{string(every), "\xff\xfe", "\xc3", "\u2028\u2029", "a\x00b", `\u0041`, "😀", `"\/`, ""} {
		task := "odd" + strconv.Itoa(i)
		req := store.AcquireRequest{Task: task, Holder: h + "h", RunID: h, TTL: time.Minute}
		l, err := s.Acquire(ctx, req)
		if req.Check() != nil {
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("holder %q: this once's acquire: %v, want ErrInvalid", h, err)
			}
			r, oerr := acquire.Run(ctx, s.c, s.taskKeys(task), s.epoch, 0, req.Holder, req.RunID, 60000, "0").Slice()
			if oerr != nil || len(r) != 3 || r[0] != "OK" {
				t.Fatalf("holder %q: an older once's acquire: %v, %v", h, r, oerr)
			}
			l, err = store.Lease{Task: task, Holder: req.Holder, RunID: req.RunID, Token: r[1].(int64)}, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		rr, err := renew.Run(ctx, s.c, s.taskKeys(task), s.epoch, l.Token, l.Holder, strconv.FormatInt(l.Token, 10), 60000).Slice()
		if err != nil || rr[0] != "OK" {
			t.Fatalf("holder %q: an older once's renewal of this once's grant: %v, %v", h, rr, err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("holder %q: release of the grant in cjson's form: %v", h, err)
		}
		if n := s.c.Exists(ctx, s.tkey(task, "lease")).Val(); n != 0 {
			t.Fatalf("holder %q: the lease key outlived the release", h)
		}
	}
}

// TestStaleGrantSameHolder: a grant that expired, then taken again by the same holder and run id,
// is not released by the first grant's release (its value names the token and the acquire time):
// ErrNotHeld, and the second grant stays.
func TestStaleGrantSameHolder(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	req := store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Millisecond}
	first, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for s.c.Exists(ctx, s.tkey("job", "lease")).Val() != 0 {
		time.Sleep(time.Millisecond)
	}
	req.TTL = time.Minute
	second, err := s.Acquire(ctx, req)
	if err != nil || second.Token != first.Token+1 {
		t.Fatalf("second grant: %+v, %v", second, err)
	}
	if err := s.Release(ctx, first); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("release of the expired first grant: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, second); err != nil {
		t.Fatalf("release of the second grant: %v", err)
	}
}

// TestReleaseAfterScriptFlush: the release's value compare is sent whole when the server lost its
// script cache (NOSCRIPT), and still releases in one go.
func TestReleaseAfterScriptFlush(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	if n := s.c.Exists(ctx, s.tkey("job", "lease")).Val(); n != 0 {
		t.Fatal("the lease key outlived the release")
	}
}
