package web

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// clock is a test's "now", moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// syncBuf is a log both the server's goroutines and the test use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

// limitedServer serves sd with the token and a clock and log the test holds, through httptest
// on loopback: a client's address is the X-Forwarded-For a test sends (a proxy on this host).
func limitedServer(t *testing.T, sd *seeded) (*Server, *httptest.Server, *clock, *syncBuf) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	log := &syncBuf{}
	srv, err := New(Config{Store: sd.s, Token: testToken, Now: c.now, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return srv, ts, c, log
}

// read is GET /api/v1/tasks from addr (through a proxy on this host) with token tok.
func read(t *testing.T, ts *httptest.Server, addr, tok string) *http.Response {
	t.Helper()
	resp, _ := get(t, ts, "/api/v1/tasks", "X-Forwarded-For", "10.9.9.9, "+addr, "Authorization", "Bearer "+tok)
	return resp
}

// TestWrongTokensAreHeldPerAddress: a client guessing the token gets freeFailures tries, then
// waits 1 s, 2 s, … (429 with Retry-After), the right token included; another address, the
// browser's login included, is not held; the wait is logged once however many requests it
// refuses, and ends.
func TestWrongTokensAreHeldPerAddress(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts, c, log := limitedServer(t, sd)
	const attacker, other = "203.0.113.7", "198.51.100.9"
	for i := 0; i < freeFailures; i++ {
		if resp := read(t, ts, attacker, "wrong-"+testToken); resp.StatusCode != 401 {
			t.Fatalf("wrong token %d: %d", i+1, resp.StatusCode)
		}
	}
	for i := 0; i < 50; i++ {
		resp := read(t, ts, attacker, testToken)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("held address with the right token: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if n := log.count("token checks held"); n != 1 {
		t.Fatalf("%d log lines for one wait, want 1:\n%s", n, log.b.String())
	}
	if resp := read(t, ts, other, testToken); resp.StatusCode != 200 {
		t.Fatalf("another address with the token: %d", resp.StatusCode)
	}
	form := url.Values{"token": {testToken}, "next": {"/"}}.Encode()
	if resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", form, "X-Forwarded-For", other); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("another address logging in: %d", resp.StatusCode)
	}
	// The next wrong token after the wait doubles it.
	c.add(1100 * time.Millisecond)
	if resp := read(t, ts, attacker, "wrong-"+testToken); resp.StatusCode != 401 {
		t.Fatalf("wrong token after the wait: %d", resp.StatusCode)
	}
	if resp := read(t, ts, attacker, testToken); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("second wait: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := log.count("refused_before=50"); n != 1 {
		t.Fatalf("the second wait's line does not count the 50 refused requests:\n%s", log.b.String())
	}
	// The right token after the wait ends it all: the address starts again from nothing.
	c.add(2100 * time.Millisecond)
	if resp := read(t, ts, attacker, testToken); resp.StatusCode != 200 {
		t.Fatalf("right token after the wait: %d", resp.StatusCode)
	}
	for i := 0; i < freeFailures-1; i++ {
		if resp := read(t, ts, attacker, "wrong-"+testToken); resp.StatusCode != 401 {
			t.Fatalf("count not forgotten after the right token: %d", resp.StatusCode)
		}
	}
}

// TestWrongLoginsAreHeld: the login form is held like the bearer header, with the page saying
// how long to wait.
func TestWrongLoginsAreHeld(t *testing.T) {
	sd := newSeeded(t)
	_, ts, _, _ := limitedServer(t, sd)
	wrong := url.Values{"token": {"wrong-" + testToken}, "next": {"/"}}.Encode()
	for i := 0; i < freeFailures; i++ {
		if resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", wrong); resp.StatusCode != 401 {
			t.Fatalf("wrong login %d: %d", i+1, resp.StatusCode)
		}
	}
	right := url.Values{"token": {testToken}, "next": {"/"}}.Encode()
	resp, body := post(t, ts, "/login", "application/x-www-form-urlencoded", right)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "try again in 1 s") || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("held login: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestStaleTokenOnOpenReadsIsNotCounted: a local script that still sends an old token reads on
// loopback, where no token is needed: nothing was checked, so nothing is held.
func TestStaleTokenOnOpenReadsIsNotCounted(t *testing.T) {
	sd := newSeeded(t)
	_, ts, _, _ := limitedServer(t, sd)
	for i := 0; i < 3*freeFailures; i++ {
		if resp, _ := get(t, ts, "/api/v1/tasks", "Authorization", "Bearer old-"+testToken); resp.StatusCode != 200 {
			t.Fatalf("open read %d with an old token: %d", i+1, resp.StatusCode)
		}
	}
}

// TestFloodFromManyAddressesIsHeld: wrong tokens from many addresses at once (or one loopback
// client writing X-Forwarded-For as it likes) reach the global ceiling; every address that has
// not shown the token lately is then held, one line is logged, and a script that used the token
// from its address before goes on. The table of addresses stays bounded.
func TestFloodFromManyAddressesIsHeld(t *testing.T) {
	sd := newSeeded(t)
	srv, ts, _, log := limitedServer(t, sd)
	srv.limit.mu.Lock()
	srv.limit.global, srv.limit.max = 20, 50
	srv.limit.mu.Unlock()
	const script = "192.0.2.1"
	if resp := read(t, ts, script, testToken); resp.StatusCode != 200 {
		t.Fatalf("script: %d", resp.StatusCode)
	}
	// Two waves of parallel requests, each from addresses of its own: the first passes the
	// ceiling (the clock stands still, so the wait it starts lasts), the second is held whole.
	flood := func(wave, n int) (held int) {
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", ts.URL+"/api/v1/tasks", nil)
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", wave, i/256, i%256))
				req.Header.Set("Authorization", "Bearer wrong-"+testToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		for _, c := range codes {
			if c == 429 {
				held++
			}
		}
		return held
	}
	flood(1, 40)
	if held := flood(2, 200); held != 200 {
		t.Fatalf("%d of 200 flooding requests held after the ceiling, want all", held)
	}
	if n := log.count("for every address"); n != 1 {
		t.Fatalf("%d global lines, want 1:\n%s", n, log.b.String())
	}
	if resp := read(t, ts, script, testToken); resp.StatusCode != 200 {
		t.Fatalf("script that used the token before: %d", resp.StatusCode)
	}
	if resp := read(t, ts, "192.0.2.2", testToken); resp.StatusCode != 429 {
		t.Fatalf("a new address during the flood: %d", resp.StatusCode)
	}
	// Without the ceiling, the table still keeps at most max addresses.
	srv.limit.mu.Lock()
	srv.limit.global = 1 << 30
	srv.limit.all = strikes{}
	srv.limit.mu.Unlock()
	for i := 0; i < 200; i++ {
		read(t, ts, fmt.Sprintf("172.16.%d.%d", i/256, i%256), "wrong")
	}
	srv.limit.mu.Lock()
	n := len(srv.limit.addrs)
	srv.limit.mu.Unlock()
	if n > 50 {
		t.Fatalf("%d addresses kept, want at most 50", n)
	}
}

// TestClientAddr: the address a request is counted under; a proxy header is taken from a loopback
// peer only.
func TestClientAddr(t *testing.T) {
	for _, c := range []struct{ peer, hdr, val, want string }{
		{"203.0.113.7:5000", "", "", "203.0.113.7"},
		{"203.0.113.7:5000", "X-Forwarded-For", "1.2.3.4", "203.0.113.7"},
		{"127.0.0.1:5000", "", "", "127.0.0.1"},
		{"127.0.0.1:5000", "X-Forwarded-For", "1.2.3.4, 198.51.100.9", "198.51.100.9"},
		{"127.0.0.1:5000", "X-Forwarded-For", "garbage", "127.0.0.1"},
		{"[::1]:5000", "X-Forwarded-For", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"127.0.0.1:5000", "Forwarded", `for=1.2.3.4, for="[2001:db8::1]:80";proto=https`, "2001:db8::/64"},
		{"127.0.0.1:5000", "X-Real-Ip", "198.51.100.10", "198.51.100.10"},
		{"[::ffff:203.0.113.8]:5000", "", "", "203.0.113.8"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.hdr != "" {
			r.Header.Set(c.hdr, c.val)
		}
		if got := clientAddr(r); got != c.want {
			t.Errorf("%s %s: %q: %q, want %q", c.peer, c.hdr, c.val, got, c.want)
		}
	}
}

// TestFailuresDuringAWaitLogNoMore: parallel requests that passed the check before a wait began
// still fail after it; they lengthen the wait, but a flood logs one line per wait.
func TestFailuresDuringAWaitLogNoMore(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	log := &syncBuf{}
	l := newLimiter(c.now, slog.New(slog.NewTextHandler(log, nil)))
	l.global = 8
	for i := 0; i < 20; i++ {
		l.fail("203.0.113.7")
	}
	if n := log.count("from one address"); n != 1 {
		t.Fatalf("%d lines for one address's wait, want 1:\n%s", n, log.b.String())
	}
	if n := log.count("for every address"); n != 1 {
		t.Fatalf("%d lines for the global wait, want 1:\n%s", n, log.b.String())
	}
	if d := l.held("203.0.113.7"); d < time.Second {
		t.Fatalf("held %s, want at least 1 s", d)
	}
}
