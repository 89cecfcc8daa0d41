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

// TestLoginFromAnotherSiteIsNotCounted: a page of another site open in the operator's browser
// posts wrong tokens to /login (a simple form or fetch, no preflight): were they counted, the
// operator's own address would be held, and their login refused, up to 5 minutes at a time. They
// are refused without a check; the operator's login then works.
func TestLoginFromAnotherSiteIsNotCounted(t *testing.T) {
	sd := newSeeded(t)
	_, ts, _, log := limitedServer(t, sd)
	wrong := url.Values{"token": {"wrong-" + testToken}, "next": {"/"}}.Encode()
	for i := 0; i < 3*freeFailures; i++ {
		resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", wrong, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a login from another site %d: %d, want 403", i+1, resp.StatusCode)
		}
	}
	right := url.Values{"token": {testToken}, "next": {"/"}}.Encode()
	resp, body := post(t, ts, "/login", "application/x-www-form-urlencoded", right, "Sec-Fetch-Site", "same-origin", "Origin", ts.URL)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("the operator's login after another site's: %d %s", resp.StatusCode, body)
	}
	if n := log.count("token checks held"); n != 0 {
		t.Errorf("%d holds logged, want none", n)
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
// client writing X-Forwarded-For as it likes) reach the global ceiling; from then on, each
// address's first wrong token holds it, one line is logged for the flood, and an address that has
// sent no wrong token is never held: the flood cannot keep the operator out, from a new address
// or with a script that has not used the token lately. The table of addresses stays bounded.
func TestFloodFromManyAddressesIsHeld(t *testing.T) {
	sd := newSeeded(t)
	srv, ts, c, log := limitedServer(t, sd)
	srv.limit.mu.Lock()
	srv.limit.global = 20
	srv.limit.mu.Unlock()
	// Parallel requests, each from an address of its own (the clock stands still, so the flood's
	// wait lasts), each address twice: once checked, then held.
	flood := func(wave, n int) (codes []int) {
		var wg sync.WaitGroup
		codes = make([]int, n)
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
		return codes
	}
	flood(1, 40)
	flood(2, 40)
	for i, code := range flood(2, 40) {
		if code != 429 {
			t.Fatalf("address %d of the flood, second wrong token: %d, want 429 (held at its first during a flood)", i, code)
		}
	}
	if n := log.count("over all addresses"); n != 1 {
		t.Fatalf("%d flood lines, want 1:\n%s", n, log.b.String())
	}
	if n := log.count("from one address"); n != 0 {
		t.Fatalf("%d lines per address during the flood, want none (the flood's line says it):\n%s", n, log.b.String())
	}
	// Addresses that sent no wrong token go on: a new one, a script back after a day.
	c.add(24 * time.Hour)
	flood(3, 40)
	for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		if resp := read(t, ts, addr, testToken); resp.StatusCode != 200 {
			t.Fatalf("%s with the token during the flood: %d", addr, resp.StatusCode)
		}
	}
	form := url.Values{"token": {testToken}, "next": {"/"}}.Encode()
	if resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", form, "X-Forwarded-For", "192.0.2.3"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a login from a new address during the flood: %d", resp.StatusCode)
	}
	// Without the ceiling, the table still keeps at most max addresses.
	srv.limit.mu.Lock()
	srv.limit.global, srv.limit.max = 1<<30, 50
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

// TestHeldAddressOnlyWhereTheTokenDecides: an address held for wrong tokens still reads where no
// token is checked (an open loopback read, /healthz, a session) with whatever Authorization header
// its scripts send, and a wrong bearer header on a page that only renders (GET /login) is not
// counted.
func TestHeldAddressOnlyWhereTheTokenDecides(t *testing.T) {
	sd := newSeeded(t)
	srv, ts, _, _ := limitedServer(t, sd)
	for i := 0; i < 3*freeFailures; i++ {
		if resp, _ := get(t, ts, "/login", "Authorization", "Bearer wrong-"+testToken); resp.StatusCode != 200 {
			t.Fatalf("GET /login with a wrong bearer header: %d", resp.StatusCode)
		}
	}
	if d := srv.limit.held("127.0.0.1"); d != 0 {
		t.Fatalf("rendering /login counted the bearer header: held %s", d)
	}
	wrong := url.Values{"token": {"wrong-" + testToken}, "next": {"/"}}.Encode()
	for i := 0; i < freeFailures; i++ {
		post(t, ts, "/login", "application/x-www-form-urlencoded", wrong)
	}
	if d := srv.limit.held("127.0.0.1"); d == 0 {
		t.Fatal("127.0.0.1 is not held after its wrong logins")
	}
	for _, path := range []string{"/api/v1/tasks", "/healthz"} {
		if resp, _ := get(t, ts, path, "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
			t.Fatalf("held loopback address, open read %s with a bearer header: %d, want 200", path, resp.StatusCode)
		}
	}
	if resp, _ := get(t, ts, "/api/v1/tasks", "X-Forwarded-For", "127.0.0.1", "Authorization", "Bearer "+testToken); resp.StatusCode != 429 {
		t.Fatalf("held address where the token decides: %d, want 429", resp.StatusCode)
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
	if n := log.count("over all addresses"); n != 1 {
		t.Fatalf("%d lines for the global wait, want 1:\n%s", n, log.b.String())
	}
	if d := l.held("203.0.113.7"); d < time.Second {
		t.Fatalf("held %s, want at least 1 s", d)
	}
}

// TestParallelWrongTokensGetNoMoreTries: wrong tokens sent at once from one address (many
// connections) get freeFailures checks between them, not one each: the check and its record are
// one step, so none passes the limit before the others' failures are counted.
func TestParallelWrongTokensGetNoMoreTries(t *testing.T) {
	sd := newSeeded(t)
	_, ts, _, _ := limitedServer(t, sd)
	for _, login := range []bool{false, true} {
		addr := "203.0.113.50"
		if login {
			addr = "203.0.113.51"
		}
		var wg sync.WaitGroup
		codes := make([]int, 60)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", ts.URL+"/api/v1/tasks", nil)
				req.Header.Set("Authorization", "Bearer wrong-"+testToken)
				if login {
					req, _ = http.NewRequest("POST", ts.URL+"/login", strings.NewReader(url.Values{"token": {"wrong-" + testToken}}.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				req.Header.Set("X-Forwarded-For", addr)
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
		checked := 0
		for _, c := range codes {
			if c == 401 {
				checked++
			} else if c != 429 {
				t.Fatalf("login %v: status %d, want 401 or 429", login, c)
			}
		}
		if checked != freeFailures {
			t.Errorf("login %v: %d of 60 parallel wrong tokens were checked, want %d", login, checked, freeFailures)
		}
	}
}

// TestCheckIsOneStep: however slow the comparison, parallel checks from one address get
// freeFailures wrong answers between them; the rest are held. Checked apart (held, compare,
// record), every one that passed held before the first failure was recorded would be checked.
func TestCheckIsOneStep(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	l := newLimiter(c.now, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	var mu sync.Mutex
	checked := 0
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait, ok := l.check("203.0.113.7", func() bool { time.Sleep(2 * time.Millisecond); return false })
			if wait == 0 && !ok {
				mu.Lock()
				checked++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if checked != freeFailures {
		t.Fatalf("%d of 40 parallel wrong tokens checked, want %d", checked, freeFailures)
	}
}
