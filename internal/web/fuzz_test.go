package web

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// FuzzAPIQuery sends the real handler, over a seeded SQLite store, any request line a client could
// send: a fuzzed path and query on every route, as GET or as a POST with a fuzzed body carrying
// the token, a session and its CSRF token. Whatever it is: no panic, no 5xx, a 4xx says in one
// line what was wrong, and a 2xx of the JSON API is JSON.
func FuzzAPIQuery(f *testing.F) {
	sd := newSeeded(f)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	sd.run("nightly", "2026-12-02", "hostA", store.Failed)
	sd.waiting("sync", "2026-12-01")
	ctx := context.Background()
	if _, err := sd.s.(store.Keys).Claim(ctx, store.ClaimRequest{Scope: "payments", Keys: []string{"k1", "k2"}}); err != nil {
		f.Fatal(err)
	}
	srv := sd.jobServer("nightly")
	h := srv.Handler()
	session := srv.sessionValue(time.Now().Add(time.Hour))
	csrf := srv.mac("csrf|" + session)
	for _, s := range fuzzSeeds {
		f.Add(false, s[0], s[1], "")
	}
	f.Add(true, "/api/v1/review/resolve", "", `{"task":"sync","slot":"2026-12-01","as":"lost","note":"n","by":"b"}`)
	f.Add(true, "/api/v1/jobs/nightly/pausee", "by=a&note=b", "")
	f.Add(true, "/review", "", "task=sync&slot=2026-12-01&as=succeeded&note=&by=x")
	f.Add(true, "/jobs", "", "job=nightly&action=x&by=%ff")
	f.Add(true, "/login", "", "token=x&next=//evil")
	f.Add(true, "*", "", "0") // "POST * HTTP/1.1": ServeMux's 400 said nothing
	f.Fuzz(func(t *testing.T, post bool, path, query, body string) {
		target := path
		if query != "" {
			target += "?" + query
		}
		method, extra := "GET", ""
		if post {
			if strings.HasPrefix(path, "/review") || strings.HasPrefix(path, "/jobs") {
				body += "&csrf=" + csrf
			}
			method = "POST"
			extra = "Content-Type: " + contentType(path) + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n" +
				"Authorization: Bearer " + testToken + "\r\nCookie: " + sessionCookie + "=" + session + "\r\n"
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" + extra + "\r\n" + body
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 itself: the handler never sees it
		}
		req.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req.WithContext(ctx))
		checkAnswer(t, method+" "+target, w)
	})
}

// fuzzSeeds are a path and a query for every route, what each parses.
var fuzzSeeds = [][2]string{
	{"/api/v1/tasks", "limit=2&after=nightly"}, {"/api/v1/tasks", "limit=-1"}, {"/api/v1/tasks", "after=%ff"},
	{"/api/v1/history", "task=nightly&slot=2026-12-01&kind=failed&holder=hostA&from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&limit=5"},
	{"/api/v1/history", "before=1764547200000000.a.3&kind=attempts"}, {"/api/v1/history", "after=1764547200000000.e.3.x&kind=events"},
	{"/api/v1/history", "kind=missed&task=sync"}, {"/api/v1/history", "from=9999-12-31T23:59:59Z&to=0001-01-01T00:00:00Z"},
	{"/api/v1/history", "to=0000-01-01T00:00:00Z"}, {"/api/v1/history", "from=-0001-01-01T00:00:00Z"},
	{"/api/v1/slot", "task=nightly&slot=2026-12-01"}, {"/api/v1/slot", "task=nightly&slot=a%2Fb"}, {"/api/v1/slot", "task=x%00"},
	{"/api/v1/leases", ""}, {"/api/v1/running", ""}, {"/api/v1/review", "limit=1"}, {"/api/v1/jobs", ""},
	{"/api/v1/timeline", "task=nightly&from=2026-11-30T00:00:00Z&to=2026-12-03T00:00:00Z"},
	{"/api/v1/timeline", "from=2026-12-03T00:00:00Z"}, {"/api/v1/timeline", "to=0001-01-01T00:00:00Z"},
	{"/api/v1/keys", "scope=payments&key=k1&key=zz"}, {"/api/v1/keys", "scope=payments&state=done&cursor=k1&limit=1"},
	{"/api/v1/scopes", "cursor=pay&limit=1"}, {"/api/v1/nope", ""},
	{"/", "after=nightly&lang=zh-CN&tz=local"}, {"/timeline", "task=nightly"}, {"/review", ""}, {"/leases", ""},
	{"/slot", "task=sync&slot=2026-12-01"}, {"/jobs", "done=x&ds=y"}, {"/keys", "scope=payments&state=unknown"},
	{"/keys", "cursor=%00"}, {"/login", "next=/slot%3Ftask=x"}, {"/static/app.js", ""}, {"/healthz", ""}, {"/metrics", ""},
	{"/nope/../api/v1/tasks", ""}, {"//api", ""},
}

// alertRE is the one line an error page shows.
var alertRE = regexp.MustCompile(`(?s)<p class="error" role="alert">(.*?)</p>`)

// checkAnswer asserts what every answer to a client's request keeps to.
func checkAnswer(t *testing.T, req string, w *httptest.ResponseRecorder) {
	t.Helper()
	code, body, ct := w.Code, w.Body.String(), w.Header().Get("Content-Type")
	switch {
	case code >= 500:
		t.Fatalf("%q: %d %s", req, code, body)
	case code >= 400 && strings.HasPrefix(ct, "application/json"):
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" || strings.Contains(e.Error, "\n") {
			t.Fatalf("%q: %d without a one-line error: %s", req, code, body)
		}
	case code >= 400 && strings.HasPrefix(ct, "text/html"):
		m := alertRE.FindStringSubmatch(body)
		if m == nil || strings.TrimSpace(m[1]) == "" || strings.Contains(m[1], "\n") {
			t.Fatalf("%q: %d without a one-line error: %s", req, code, body)
		}
	case code >= 400:
		if b := strings.TrimSuffix(body, "\n"); b == "" || strings.Contains(b, "\n") {
			t.Fatalf("%q: %d without a one-line error: %q", req, code, body)
		}
	case code < 300 && strings.HasPrefix(req, "GET /api/") && (!strings.HasPrefix(ct, "application/json") || !json.Valid([]byte(body))):
		t.Fatalf("%q: %d not JSON: %s", req, code, body)
	}
}

func contentType(path string) string {
	if strings.HasPrefix(path, "/api/") {
		return "application/json"
	}
	return "application/x-www-form-urlencoded"
}
