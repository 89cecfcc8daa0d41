package web

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// The attacks of a hostile client on the access rules (auth.go), found by attacking a real once
// serve with curl and Chromium.

// TestProxiedReadsNeedTheToken: a reverse proxy on the same host (nginx, Apache, Caddy, Traefik)
// forwards requests from anywhere to a loopback listener, and nginx and Apache send the backend's
// own address as Host (127.0.0.1:8080) by default: such a request looks local, and was read
// without the token. A request carrying a proxy's headers is read as one from beyond loopback.
func TestProxiedReadsNeedTheToken(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts := sd.server(testToken)
	for _, h := range [][2]string{{"X-Forwarded-For", "203.0.113.9"}, {"X-Real-IP", "203.0.113.9"},
		{"Forwarded", "for=203.0.113.9;proto=https"}, {"X-Forwarded-Host", "once.example.com"},
		{"X-Forwarded-Proto", "https"}, {"Via", "1.1 proxy"}} {
		if resp, body := get(t, ts, "/api/v1/tasks", h[0], h[1]); resp.StatusCode != 401 || strings.Contains(body, "nightly") {
			t.Errorf("a read through a proxy (%s) without the token: %d %s", h[0], resp.StatusCode, body)
		}
		if resp, _ := get(t, ts, "/api/v1/tasks", h[0], h[1], "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
			t.Errorf("a read through a proxy (%s) with the token: %d", h[0], resp.StatusCode)
		}
	}
	if resp, _ := get(t, ts, "/healthz", "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != 200 {
		t.Errorf("/healthz through a proxy: %d", resp.StatusCode)
	}
}

// TestReadsNeedTheTokenWhenAsked: Config.ReadsNeedToken closes reads on loopback too (a host
// with other users, who can all reach 127.0.0.1, or a proxy that sends no header of its own).
func TestReadsNeedTheTokenWhenAsked(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	if _, err := New(Config{Store: sd.s, ReadsNeedToken: true}); err == nil {
		t.Fatal("ReadsNeedToken without a token: no error (nothing could be read)")
	}
	srv, err := New(Config{Store: sd.s, Token: testToken, ReadsNeedToken: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, p := range []string{"/api/v1/tasks", "/metrics"} {
		if resp, body := get(t, ts, p); resp.StatusCode != 401 || strings.Contains(body, "nightly") {
			t.Errorf("%s on loopback without the token: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, ts, "/slot?task=nightly&slot=2026-12-01"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a page on loopback without a session: %d, want a redirect to /login", resp.StatusCode)
	}
	if resp, _ := get(t, ts, "/api/v1/tasks", "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
		t.Errorf("with the token: %d", resp.StatusCode)
	}
	if resp, _ := get(t, ts, "/login"); resp.StatusCode != 200 {
		t.Errorf("/login: %d", resp.StatusCode)
	}
}

// login posts the token to /login with the headers hdr and returns the session cookie set.
func login(t *testing.T, ts *httptest.Server, hdr ...string) *http.Cookie {
	t.Helper()
	resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", url.Values{"token": {testToken}}.Encode(), hdr...)
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("login: %d, no session cookie", resp.StatusCode)
	return nil
}

// TestSessionCookieSecureBehindATLSProxy: behind a proxy that ends TLS the server speaks plain
// HTTP, and the cookie lacked Secure: the browser then sent it over any plain http:// URL of the
// same host name too (cookies ignore ports).
func TestSessionCookieSecureBehindATLSProxy(t *testing.T) {
	sd := newSeeded(t)
	_, ts := sd.server(testToken)
	if c := login(t, ts); c.Secure {
		t.Error("plain HTTP, no proxy: the cookie is Secure (a browser would drop it)")
	}
	for _, h := range [][2]string{{"X-Forwarded-Proto", "https"}, {"X-Forwarded-Proto", "https, http"}, {"Forwarded", `for=203.0.113.9;proto=https;host="once.example.com"`}} {
		if c := login(t, ts, h[0], h[1]); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("behind a TLS proxy (%s: %s): cookie %+v, want Secure, HttpOnly, SameSite=Strict", h[0], h[1], c)
		}
	}
}

// TestLogoutOnlyFromThisOrigin: another site's page could post to /logout and end the
// operator's session (a nuisance in the middle of a review). Log out is taken from this origin
// only, like every form.
func TestLogoutOnlyFromThisOrigin(t *testing.T) {
	sd := newSeeded(t)
	_, ts := sd.server(testToken)
	c := login(t, ts)
	cookie := c.Name + "=" + c.Value
	resp, _ := post(t, ts, "/logout", "application/x-www-form-urlencoded", "", "Cookie", cookie, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("a cross-site log out: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, _ = post(t, ts, "/logout", "application/x-www-form-urlencoded", "", "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("log out: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if got := resp.Cookies()[0]; !got.HttpOnly || got.SameSite != http.SameSiteStrictMode {
		t.Errorf("the cookie that ends the session: %+v, want the session cookie's attributes", got)
	}
}

// TestJobActionChecksWhoAndWhy: a pause's "by" becomes a name in the ledger (the pause request's
// claimant, shown by once status and the jobs page): it is checked as --by is, and its note as a
// note, instead of reaching the store with escape sequences, line breaks or NUL bytes.
func TestJobActionChecksWhoAndWhy(t *testing.T) {
	sd := newSeeded(t)
	srv := sd.jobServer("nightly")
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, q := range []string{"by=" + url.QueryEscape("bob\x1b]0;pwned\x07"), "by=" + url.QueryEscape("bob\nroot"),
		"by=bob&note=" + url.QueryEscape("a\x00b"), "by=bob&note=" + url.QueryEscape("\xff")} {
		resp, body := post(t, ts, "/api/v1/jobs/nightly/pause?"+q, "application/json", "", "Authorization", "Bearer "+testToken)
		if resp.StatusCode != 400 {
			t.Errorf("pause with %s: %d %s, want 400", q, resp.StatusCode, body)
		}
	}
	if p, err := scheduler.Paused(context.Background(), sd.s, []string{"nightly"}); err != nil || len(p) != 0 {
		t.Fatalf("a refused pause paused the job: %v %v", p, err)
	}
	resp, body := post(t, ts, "/api/v1/jobs/nightly/pause?by=bob&note="+url.QueryEscape("disk full\nback at 9"), "application/json", "", "Authorization", "Bearer "+testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("a good pause: %d %s", resp.StatusCode, body)
	}
	// Without "by": the server cannot know who holds its token, so it says so, rather than
	// naming itself ("once serve via once serve") or its own OS user.
	if resp, body := post(t, ts, "/api/v1/jobs/nightly/resume", "application/json", "", "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
		t.Fatalf("resume: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, ts, "/api/v1/jobs/nightly/pause?note=upgrade", "application/json", "", "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
		t.Fatalf("a pause without by: %d %s", resp.StatusCode, body)
	}
	p, err := scheduler.Paused(context.Background(), sd.s, []string{"nightly"})
	if want := "pause by someone via once serve: upgrade"; err != nil || p["nightly"].RunID != want {
		t.Errorf("a pause without by: %+v %v, want %q", p, err, want)
	}
}

// TestBusyServerRefusesMore: every read of a page fans out to the store (a page of scopes counts
// up to 50,000 keys: 1.7 s of SQLite), and any local user may read on loopback: without a bound,
// a loop of parallel requests kept the store busy for the whole fleet. At most maxInFlight
// requests read at once; one more waits a while, then gets 503 with Retry-After. /metrics has
// places of its own: a busy dashboard does not fail Prometheus' scrape (the alerts ride on it).
func TestBusyServerRefusesMore(t *testing.T) {
	sd := newSeeded(t)
	release := make(chan struct{})
	var in atomic.Int32
	srv, err := New(Config{Store: sd.s, Jobs: func() []scheduler.Job {
		in.Add(1)
		<-release
		return nil
	}, Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("once_up 1\n")) })})
	if err != nil {
		t.Fatal(err)
	}
	srv.busyWait = 50 * time.Millisecond
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll() // before ts.Close, which waits for the requests blocked in Jobs
	var wg sync.WaitGroup
	for range maxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.Get(ts.URL + "/api/v1/jobs"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); in.Load() < maxInFlight; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests in flight after 30 s", in.Load(), maxInFlight)
		}
	}
	// A client that gives up: were the request let through, it would block in Jobs until release.
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(ts.URL + "/api/v1/tasks")
	if err != nil {
		t.Fatalf("one request more than the bound: %v (it was let through: no bound)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("one request more than the bound: %d (Retry-After %q)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := get(t, ts, "/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz while busy: %d (a load balancer would take the node out)", resp.StatusCode)
	}
	if resp, body := get(t, ts, "/metrics"); resp.StatusCode != 200 || !strings.Contains(body, "once_up") {
		t.Errorf("/metrics while the dashboard is busy: %d %s (the scrape fails, alerts go stale)", resp.StatusCode, body)
	}
	releaseAll()
	wg.Wait()
	if resp, body := get(t, ts, "/api/v1/tasks"); resp.StatusCode != 200 {
		t.Errorf("after the others ended: %d %s", resp.StatusCode, body)
	}
}

// TestHostileTextIsEscapedEverywhere: the sinks TestHostileTextIsEscaped does not reach — a slot
// value, a resolution's by and note, a pause's by and note (the jobs page), a scope and its keys,
// an error page quoting a parameter, the SVG timeline's text — show hostile text as text.
func TestHostileTextIsEscapedEverywhere(t *testing.T) {
	const evil = `"><img src=x onerror=alert(1)><svg onload=alert(2)>`
	ctx := context.Background()
	sd := newSeeded(t)
	sd.run("t", evil, evil, store.Failed)
	sd.waiting("w", "s2")
	if _, err := sd.s.Resolve(ctx, store.ResolveRequest{Task: "w", Slot: "s2", As: store.Failed, By: evil, Note: evil}); err != nil {
		t.Fatal(err)
	}
	ks := sd.s.(store.Keys)
	if _, err := ks.Claim(ctx, store.ClaimRequest{Scope: evil, Keys: []string{evil, "k2"}}); err != nil {
		t.Fatal(err)
	}
	srv := sd.jobServer("t")
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, body := post(t, ts, "/api/v1/jobs/t/pause?by="+url.QueryEscape(evil)+"&note="+url.QueryEscape(evil), "application/json", "", "Authorization", "Bearer "+testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	e := url.QueryEscape(evil)
	for _, p := range []string{"/", "/timeline", "/timeline?task=t", "/slot?task=t&slot=" + e, "/slot?task=w&slot=s2", "/jobs",
		"/keys", "/keys?scope=" + e, "/keys?scope=" + e + "&state=" + e, "/slot?task=t&slot=" + e + "x", "/timeline?from=" + e} {
		_, body := get(t, ts, p)
		if strings.Contains(body, "<img src=x") || strings.Contains(body, "<svg onload") {
			t.Errorf("%s: hostile text became markup", p)
		}
		if !strings.Contains(body, "&lt;img src=x") {
			t.Errorf("%s: the hostile text is not shown as text (was it read at all?)", p)
		}
	}
}

// TestLoginPageShowsNoStore: /login is open to anyone (beyond loopback, through a proxy), and its
// footer named the store — host, port, user, database, prefix — and once's version, which only
// readers may see.
func TestLoginPageShowsNoStore(t *testing.T) {
	sd := newSeeded(t)
	srv, _ := sd.server(testToken)
	srv.loopback = false
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	srv.c.Version = "v9.8.7"
	for _, p := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(p, ts.URL+"/login", strings.NewReader("token=wrong"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		_, body := do(t, req, nil)
		if strings.Contains(body, "db/once") || strings.Contains(body, "v9.8.7") {
			t.Errorf("%s /login without the token shows the store or the version:\n%s", p, body)
		}
	}
	if _, body := get(t, ts, "/login", "Authorization", "Bearer "+testToken); !strings.Contains(body, "postgres://once:xxxxx@db/once") {
		t.Errorf("/login to a reader does not show the store:\n%s", body)
	}
}

// TestBusyPlacesComeBackAfterAPanic: a handler that panics (net/http recovers it) gives its
// place back: more panics than places leave the server answering, not 503 for ever.
func TestBusyPlacesComeBackAfterAPanic(t *testing.T) {
	sd := newSeeded(t)
	var boom atomic.Bool
	boom.Store(true)
	srv, err := New(Config{Store: sd.s, Jobs: func() []scheduler.Job {
		if boom.Load() {
			panic("a bug in a handler")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv.busyWait = 50 * time.Millisecond
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panics' stacks
	ts.Start()
	defer ts.Close()
	for range 2 * maxInFlight {
		if resp, err := http.Get(ts.URL + "/api/v1/jobs"); err == nil {
			resp.Body.Close()
		}
	}
	boom.Store(false)
	if resp, body := get(t, ts, "/api/v1/jobs"); resp.StatusCode != 200 {
		t.Errorf("after %d panics: %d %s, want 200", 2*maxInFlight, resp.StatusCode, body)
	}
}

// TestBusyWaitEndsWhenTheClientLeaves: a request waiting for a place stops waiting when its
// client leaves (its context ends), instead of holding a goroutine for busyWait.
func TestBusyWaitEndsWhenTheClientLeaves(t *testing.T) {
	srv := &Server{inFlight: make(chan struct{}, 1), busyWait: time.Hour}
	srv.inFlight <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest("GET", "/api/v1/tasks", nil).WithContext(ctx)
	done := make(chan bool, 1)
	go func() { done <- srv.admit(r, srv.inFlight) }()
	cancel()
	select {
	case ok := <-done:
		if ok {
			t.Error("admitted with no place free")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting 30 s after the client left")
	}
}

// The auth scheme is case-insensitive (RFC 9110 11.1): "bearer TOKEN" is the token too. /static/
// lists nothing. A limit is written as the CLI's numbers are: no sign, no leading 0.
func TestBearerAnyCaseNoListingPlainLimit(t *testing.T) {
	sd := newSeeded(t)
	_, ts := sd.server(testToken)
	// Through a proxy's header, so that the read needs the token (TestProxiedReadsNeedTheToken).
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		if resp, b := get(t, ts, "/api/v1/tasks", "X-Forwarded-For", "203.0.113.9", "Authorization", scheme+" "+testToken); resp.StatusCode != 200 {
			t.Errorf("%s TOKEN: %d %s", scheme, resp.StatusCode, b)
		}
		if resp, b := get(t, ts, "/api/v1/tasks", "X-Forwarded-For", "203.0.113.9", "Authorization", scheme+" "+testToken+"x"); resp.StatusCode != 401 {
			t.Errorf("%s with a wrong token: %d %s", scheme, resp.StatusCode, b)
		}
	}
	if resp, b := get(t, ts, "/static/"); resp.StatusCode != 404 || strings.Contains(b, "app.js") {
		t.Errorf("/static/: %d %s, want 404 without a listing", resp.StatusCode, b)
	}
	for _, v := range []string{"+5", "05", "-1", "0"} {
		if resp, b := get(t, ts, "/api/v1/history?limit="+v); resp.StatusCode != 400 || !strings.Contains(b, "give a whole number") {
			t.Errorf("limit=%s: %d %s, want 400", v, resp.StatusCode, b)
		}
	}
}

// TestPagesSayTheirZone: a page's times are UTC, or the reader's own zone after ?tz=local (kept in
// a cookie for a year): the switch marks the one in use, and the timeline's axis, drawn on the
// server in UTC whatever the zone, says UTC. Without it a reader in New York saw the footer's
// 4:32 AM beside an axis ending at 09:32, neither naming its zone.
func TestPagesSayTheirZone(t *testing.T) {
	sd := newSeeded(t)
	_, ts := sd.server("")
	for _, c := range []struct{ query, cookie, current string }{
		{"", "", "tz=utc"}, {"?tz=local", "", "tz=local"}, {"", "once_tz=local", "tz=local"}, {"?tz=utc", "once_tz=local", "tz=utc"},
	} {
		var hdr []string
		if c.cookie != "" {
			hdr = []string{"Cookie", c.cookie}
		}
		_, body := get(t, ts, "/timeline"+c.query, hdr...)
		if n := strings.Count(body, `aria-current="true"`); n != 1 || !strings.Contains(body, c.current+`" aria-current="true"`) {
			t.Errorf("/timeline%s (cookie %q): %d zones marked, want %s marked", c.query, c.cookie, n, c.current)
		}
		if !strings.Contains(body, `<text class="tickzone" x="4" y="14">UTC</text>`) {
			t.Errorf("/timeline%s: the axis does not say it is in UTC", c.query)
		}
	}
}

// TestBusyWaitEndsWhenTheStoreHangs: a request waiting for a place gives up as soon as a request
// in a place meets the store hanging (noteHang), not at busyWait: it would only wait for the same
// store. A scrape's wait is not the dashboard's store's and goes on.
func TestBusyWaitEndsWhenTheStoreHangs(t *testing.T) {
	srv := &Server{inFlight: make(chan struct{}, 1), scrapes: make(chan struct{}, 1), busyWait: time.Hour}
	srv.c.Now, srv.c.StoreTimeout = time.Now, time.Minute
	srv.inFlight <- struct{}{}
	srv.scrapes <- struct{}{}
	r := httptest.NewRequest("GET", "/api/v1/tasks", nil)
	page, scrape := make(chan bool, 1), make(chan bool, 1)
	go func() { page <- srv.admit(r, srv.inFlight) }()
	go func() { scrape <- srv.admit(httptest.NewRequest("GET", "/metrics", nil), srv.scrapes) }()
	time.Sleep(50 * time.Millisecond) // both waiting (a wake before they wait is checked by hanging)
	srv.noteHang(true)
	select {
	case ok := <-page:
		if ok {
			t.Error("admitted with no place free")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting 30 s after the store was seen hanging")
	}
	<-srv.scrapes
	if ok := <-scrape; !ok {
		t.Error("the scrape was refused when its place came free")
	}
	if srv.admit(r, srv.inFlight) {
		t.Error("admitted while the store hangs and no place is free")
	}
}
