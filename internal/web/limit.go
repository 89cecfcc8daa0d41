package web

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The limit on failed token checks: a wrong token at POST /login, or a wrong bearer header where
// the token decides (a read beyond the open loopback rule, a change). Each client address
// (clientAddr) may send freeFailures wrong tokens, then waits before its next check: 1 s, 2 s, 4 s, …
// up to maxBlock, answered 429 with Retry-After — the right token too, or the wait would not slow
// the guessing; its count is forgotten forgetAfter after its last failure, or at once when it
// presents the token. Over all addresses, globalFree failures start a flood: while it lasts (the
// same backoff, over all failures), an address's first wrong token holds it at once, as long as
// the flood's wait, instead of after freeFailures. An address that has sent no wrong token is
// never held: holding every address would let anyone keep the operator out (a new address, a
// script that runs daily, everyone after a restart) for one request every 5 minutes. So a flood
// from N addresses gets about N guesses per 5 minutes, and one from more addresses than the table
// keeps is not bounded: the token's length is what stands against it.
// One line is logged when a wait starts (during a flood, only the flood's), not one per refused
// request; the tables are bounded.
const (
	freeFailures = 5
	globalFree   = 100
	firstBlock   = time.Second
	maxBlock     = 5 * time.Minute
	forgetAfter  = 15 * time.Minute
	maxAddrs     = 4096
)

// strikes is the failures of one address, or of all of them.
type strikes struct {
	n     int       // failures since the count was last forgotten
	last  time.Time // the last failure
	until time.Time // no check before this
	// refused counts the requests refused since the last line logged: the next line says it.
	refused int
}

// strike records a failure at now; it returns the wait it starts (0: none yet).
func (e *strikes) strike(now time.Time, free int) time.Duration {
	if now.Sub(e.last) > forgetAfter {
		e.n = 0
	}
	e.n++
	e.last = now
	if e.n < free {
		return 0
	}
	d := maxBlock
	if k := e.n - free; k < 20 && firstBlock<<k < maxBlock {
		d = firstBlock << k
	}
	e.until = now.Add(d)
	return d
}

// stale reports whether e holds nothing any more at now.
func (e *strikes) stale(now time.Time) bool {
	return !now.Before(e.until) && now.Sub(e.last) > forgetAfter
}

type limiter struct {
	mu    sync.Mutex
	now   func() time.Time
	log   *slog.Logger
	addrs map[string]*strikes
	all   strikes
	// free, global and max are the constants above; tests lower them.
	free, global, max int
}

func newLimiter(now func() time.Time, log *slog.Logger) *limiter {
	return &limiter{now: now, log: log, addrs: map[string]*strikes{},
		free: freeFailures, global: globalFree, max: maxAddrs}
}

// held is how long addr must wait before its next token check (0: it may go on). A refused
// request is counted, not logged.
func (l *limiter) held(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldLocked(addr, l.now())
}

func (l *limiter) heldLocked(addr string, now time.Time) time.Duration {
	if e := l.addrs[addr]; e != nil && now.Before(e.until) {
		e.refused++
		if now.Before(l.all.until) {
			l.all.refused++
		}
		return e.until.Sub(now)
	}
	return 0
}

// check is held, the token check (right) and its record under one lock: parallel requests from
// one address cannot all pass held before the first of their failures is recorded. right must
// be quick (it compares a string read before): the lock is every address's.
func (l *limiter) check(addr string, right func() bool) (wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if wait = l.heldLocked(addr, now); wait > 0 {
		return wait, false
	}
	if right() {
		delete(l.addrs, addr)
		return 0, true
	}
	l.failLocked(addr, now)
	return 0, false
}

// fail records a wrong token from addr.
func (l *limiter) fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(addr, l.now())
}

func (l *limiter) failLocked(addr string, now time.Time) {
	e := l.addrs[addr]
	if e == nil {
		l.makeRoom(now)
		e = &strikes{}
		l.addrs[addr] = e
	}
	// A failure that raced past held while a wait began (parallel requests) lengthens the wait
	// without a line of its own: one line per wait.
	wasHeld, wasFlood := now.Before(e.until), now.Before(l.all.until)
	if d := l.all.strike(now, l.global); d > 0 && !wasFlood {
		l.log.Warn("too many wrong tokens over all addresses: until it ends, an address's first wrong token holds it", "failures", l.all.n, "wait", d, "refused_before", l.all.refused)
		l.all.refused = 0
	}
	flood := now.Before(l.all.until)
	d := e.strike(now, l.free)
	if flood && l.all.until.After(e.until) {
		e.until, d = l.all.until, l.all.until.Sub(now)
	}
	if d > 0 && !wasHeld && !flood {
		l.log.Warn("token checks held: too many wrong tokens from one address", "from", addr, "failures", e.n, "wait", d, "refused_before", e.refused)
		e.refused = 0
	}
}

// makeRoom keeps l.addrs under l.max: it looks at up to 64 entries (in the map's random order),
// drops the stale ones, and when none was, the one among them whose wait ends first (a held
// address is kept over one that waits for nothing).
func (l *limiter) makeRoom(now time.Time) {
	if len(l.addrs) < l.max {
		return
	}
	victim, seen, dropped := "", 0, false
	for k, e := range l.addrs {
		if e.stale(now) {
			delete(l.addrs, k)
			dropped = true
		} else if victim == "" || e.until.Before(l.addrs[victim].until) {
			victim = k
		}
		if seen++; seen == 64 {
			break
		}
	}
	if !dropped && victim != "" {
		delete(l.addrs, victim)
	}
}

// clientAddr is the address r's token checks are counted under: the peer's IP, or, when the peer
// is on loopback and r came through a proxy (proxied), the address that proxy got it from: the
// last X-Forwarded-For entry (a proxy appends its peer; the entries before it are what the client
// sent, which anyone can write), else the last Forwarded for=, else X-Real-Ip. A header from a
// peer beyond loopback is not taken. An IPv6 address counts as its /64: one host often has all of it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip.IsLoopback() && proxied(r) {
		if f, ok := forwardedFor(r); ok {
			ip = f
		}
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// forwardedFor is the client address a proxy on this host says it got r from.
func forwardedFor(r *http.Request) (netip.Addr, bool) {
	if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 {
		all := strings.Split(strings.Join(v, ","), ",")
		return parseHostAddr(all[len(all)-1])
	}
	if v := r.Header.Values("Forwarded"); len(v) > 0 {
		var last string
		for _, part := range strings.FieldsFunc(strings.Join(v, ","), func(c rune) bool { return c == ';' || c == ',' }) {
			if k, val, _ := strings.Cut(strings.TrimSpace(part), "="); strings.EqualFold(k, "for") {
				last = val
			}
		}
		return parseHostAddr(last)
	}
	return parseHostAddr(r.Header.Get("X-Real-Ip"))
}

// parseHostAddr reads "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]:80", quoted or not.
func parseHostAddr(s string) (netip.Addr, bool) {
	s = strings.Trim(strings.TrimSpace(s), `"`)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	return ip, err == nil
}
