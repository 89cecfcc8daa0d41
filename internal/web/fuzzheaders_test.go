package web

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// headerRoutes are the requests FuzzAPIHeaders sends, the state-changing ones first: a route is
// picked by a fuzzed byte, so that the fuzzer spends its time on the headers.
var headerRoutes = []struct{ method, target string }{
	{"POST", "/api/v1/review/resolve"},
	{"POST", "/api/v1/jobs/nightly/pause?by=fuzz&note=n"},
	{"POST", "/api/v1/jobs/nightly/trigger?by=fuzz"},
	{"POST", "/api/v1/jobs/nightly/resume?by=fuzz"},
	{"POST", "/review"},
	{"POST", "/jobs"},
	{"POST", "/login"},
	{"POST", "/logout"},
	{"GET", "/api/v1/tasks"},
	{"GET", "/api/v1/slot?task=sync&slot=2026-12-01"},
	{"GET", "/"},
	{"GET", "/review"},
	{"GET", "/login?next=/jobs"},
	{"GET", "/metrics"},
	{"GET", "/healthz"},
	{"HEAD", "/api/v1/leases"},
	{"PUT", "/api/v1/review/resolve"},
	{"OPTIONS", "/jobs"},
}

// FuzzAPIHeaders sends the real handler, with the access rules on (a token; a loopback listener or
// one beyond), requests whose Host, Origin, Cookie, Authorization, Content-Type and Content-Length
// are fuzzed, with any other header lines (odd bytes, proxies' headers, a second Host) and a
// fuzzed body, on every route that changes something and on reads. Whatever they are: no panic, no
// 5xx, a 4xx says in one line what was wrong (checkAnswer), and nothing changes in the store (a
// slot resolved, a job paused, resumed or triggered) unless the request carried the token: an
// API call its bearer header, a dashboard form the session cookie and the CSRF token.
func FuzzAPIHeaders(f *testing.F) {
	sd := newSeeded(f)
	sd.run("nightly", "2026-12-02", "hostA", store.Failed)
	sd.waiting("sync", "2026-12-01")
	sd.run("ctl", "api", "hostA", store.Unknown) // waiting, for the controls below
	sd.run("ctl", "form", "hostA", store.Unknown)
	srv := sd.jobServer("nightly")
	// A session that lasts: the corpus holds it, so it must not expire between runs.
	session := srv.sessionValue(time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC))
	csrf := srv.mac("csrf|" + session)
	bearer, cookie := "Bearer "+testToken, sessionCookie+"="+session
	const local = "127.0.0.1:8080"
	resolve := `{"task":"sync","slot":"2026-12-01","as":"failed","note":"n","by":"b"}`
	form := "task=sync&slot=2026-12-01&as=failed&note=&by=x&csrf=" + csrf
	for i := range headerRoutes {
		f.Add(false, uint8(i), local, "", "", "", "", "", "", "")
		f.Add(true, uint8(i), local, "", "", bearer, "", "", "", "")
	}
	f.Add(false, uint8(0), local, "", cookie, "", "application/json", "", "", resolve)              // an API change with a cookie alone
	f.Add(false, uint8(0), local, "", "", "bearer "+testToken, "application/json", "", "", resolve) // the scheme in lower case
	f.Add(false, uint8(0), local, "", "", "Bearer "+testToken+"x", "", "", "", resolve)
	f.Add(false, uint8(0), local, "", "", "Bearer  "+testToken+" ", "application/json", "", "", resolve)
	f.Add(false, uint8(0), local, "", "", bearer, "application/json", "5", "", resolve)
	f.Add(false, uint8(0), local, "", "", bearer, "application/json", "99999", "", resolve)
	f.Add(false, uint8(0), local, "", "", bearer, "text/plain", "", "", resolve)
	f.Add(false, uint8(1), "evil.example", "http://evil.example", "", bearer, "", "", "", "")
	f.Add(false, uint8(4), local, "", cookie, "", "application/x-www-form-urlencoded", "", "", form)
	f.Add(false, uint8(4), local, "http://evil.example", cookie, "", "application/x-www-form-urlencoded", "", "", form)
	f.Add(false, uint8(4), local, "null", cookie, "", "application/x-www-form-urlencoded", "", "Sec-Fetch-Site: cross-site", form)
	f.Add(false, uint8(4), local, "", cookie+"; "+sessionCookie+"=1.x", "", "multipart/form-data; boundary=x", "", "", "--x\r\n")
	f.Add(false, uint8(4), local, "", cookie, "", "application/x-www-form-urlencoded", "", "", strings.Replace(form, csrf, csrf[:10], 1))
	f.Add(false, uint8(5), local, "", cookie, "", "application/x-www-form-urlencoded; charset=\xff", "", "", "job=nightly&action=pause&by=a&csrf="+csrf)
	f.Add(false, uint8(6), local, "", "", "", "application/x-www-form-urlencoded", "", "", "token="+testToken+"&next=/jobs")
	f.Add(true, uint8(10), "localhost", "", "", "", "", "", "X-Forwarded-For: 10.0.0.1\r\nVia: 1.1 proxy", "")
	f.Add(false, uint8(10), "[::1]:80", "", "", "", "", "", "Host: evil.example", "")
	f.Add(false, uint8(8), "127.0.0.1\x00", "", "", "", "", "", "X-Odd: \x01\xff\x7f", "")
	f.Add(false, uint8(8), local, "", sessionCookie+"=\xff\x00", "Basic Zm9vOmJhcg==", "", "", "Authorization: "+bearer, "")
	f.Add(true, uint8(2), local, "", "", bearer, "", "-1", "Transfer-Encoding: chunked", "0\r\n\r\n")

	ctx := context.Background()
	// The check below is not vacuous: requests with the token, sent through the same steps, change
	// what storeState shows (an API resolve, a dashboard form's resolve, a pause, its resume).
	control := func(target, cookies, auth, ctype, body string) {
		before := storeState(f, ctx, sd.s)
		raw := headerRequest("POST", target, local, "", cookies, auth, ctype, "", "", body)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			f.Fatal(err)
		}
		req.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, req.WithContext(ctx))
		if after := storeState(f, ctx, sd.s); after == before {
			f.Fatalf("POST %s with the token changed nothing (%d %s): the fuzzer's check would see no change", target, w.Code, w.Body)
		}
	}
	control("/api/v1/review/resolve", "", bearer, "application/json", `{"task":"ctl","slot":"api","as":"failed","note":"n","by":"b"}`)
	control("/review", cookie, "", "application/x-www-form-urlencoded", "task=ctl&slot=form&as=failed&note=n&by=x&csrf="+csrf)
	control("/api/v1/jobs/nightly/pause?by=fuzz&note=n", "", bearer, "", "")
	control("/api/v1/jobs/nightly/resume?by=fuzz", "", bearer, "", "")
	srv.limit = newLimiter(srv.c.Now, srv.c.Log)

	remote := sd.jobServer("nightly")
	remote.loopback = false // a listener beyond loopback: every read needs the token too
	handlers := map[bool]*Server{false: srv, true: remote}
	f.Fuzz(func(t *testing.T, beyond bool, route uint8, host, origin, cookies, auth, ctype, clen, extra, body string) {
		s := handlers[beyond]
		s.limit = newLimiter(s.c.Now, s.c.Log) // each request on its own: no 429 for an earlier one's wrong token
		rt := headerRoutes[int(route)%len(headerRoutes)]
		raw := headerRequest(rt.method, rt.target, host, origin, cookies, auth, ctype, clen, extra, body)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 itself: the handler never sees it
		}
		req.RemoteAddr = "127.0.0.1:40000"
		before := storeState(t, ctx, sd.s)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req.WithContext(ctx))
		checkAnswer(t, rt.method+" "+rt.target, w)
		after := storeState(t, ctx, sd.s)
		if before == after {
			return
		}
		path, _, _ := strings.Cut(rt.target, "?")
		var allowed bool
		switch {
		case strings.HasPrefix(path, "/api/"):
			tok, ok := bearerToken(req) // the scheme in any case
			allowed = ok && strings.TrimSpace(tok) == testToken
		case path == "/review" || path == "/jobs":
			c, err := req.Cookie(sessionCookie)
			allowed = err == nil && c.Value == session && strings.Contains(body, "csrf="+csrf)
		}
		if !allowed {
			t.Fatalf("%s %s without the token changed the store (%d):\n%s\nbefore: %s\nafter:  %s", rt.method, rt.target, w.Code, raw, before, after)
		}
	})
}

// headerRequest is the raw request: the header lines given (Host always, the others when not
// empty; Content-Length the body's when clen is empty and there is a body), then extra's lines.
func headerRequest(method, target, host, origin, cookies, auth, ctype, clen, extra, body string) string {
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n")
	for _, h := range [][2]string{{"Origin", origin}, {"Cookie", cookies}, {"Authorization", auth}, {"Content-Type", ctype}} {
		if h[1] != "" {
			b.WriteString(h[0] + ": " + h[1] + "\r\n")
		}
	}
	if clen == "" && body != "" {
		clen = strconv.Itoa(len(body))
	}
	if clen != "" {
		b.WriteString("Content-Length: " + clen + "\r\n")
	}
	if extra != "" {
		b.WriteString(extra)
		if !strings.HasSuffix(extra, "\n") {
			b.WriteString("\r\n")
		}
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// storeState is what a state-changing request could change: the slots' last attempts and
// resolutions, and the job's pause and trigger.
func storeState(t testing.TB, ctx context.Context, s store.Store) string {
	t.Helper()
	var b strings.Builder
	for _, ts := range [][2]string{{"sync", "2026-12-01"}, {"nightly", "2026-12-02"}, {"ctl", "api"}, {"ctl", "form"}} {
		st, err := s.Slot(ctx, ts[0], ts[1])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s/%s: waiting %v", ts[0], ts[1], st.Waiting)
		if st.Last != nil {
			fmt.Fprintf(&b, " last %d %s %+v; ", st.Last.Number, st.Last.State, st.Last.Resolution)
		}
	}
	paused, err := scheduler.Paused(ctx, s, []string{"nightly"})
	if err != nil {
		t.Fatal(err)
	}
	triggered, err := scheduler.Triggered(ctx, s, []string{"nightly"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "paused %v triggered %v", paused, triggered)
	return b.String()
}
