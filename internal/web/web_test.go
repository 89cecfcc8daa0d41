package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

const testToken = "0123456789abcdef0123"

// seeded is a real SQLite store with history written through the Ledger API.
type seeded struct {
	t testing.TB
	s store.Store
}

func newSeeded(t testing.TB) *seeded {
	t.Helper()
	s, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &seeded{t: t, s: s}
}

// run records one attempt of (task, slot) by holder, ending in state (running: left running with
// its lease held).
func (sd *seeded) run(task, slot, holder string, state store.State) store.Attempt {
	sd.t.Helper()
	ctx := context.Background()
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + task + "-" + holder + "-" + slot, TTL: time.Minute})
	if err != nil {
		sd.t.Fatal(err)
	}
	st, err := sd.s.Slot(ctx, task, slot)
	if err != nil {
		sd.t.Fatal(err)
	}
	n := 1
	if st.Last != nil {
		n = st.Last.Number + 1
	}
	a, err := sd.s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: l.RunID, Number: n, Holder: holder, Token: l.Token})
	if err != nil {
		sd.t.Fatal(err)
	}
	if state == store.Running {
		return a
	}
	code := 0
	if state == store.Failed {
		code = 1
	}
	if a, err = sd.s.Finish(ctx, l.RunID, l.Token, store.Outcome{State: state, ExitCode: &code}); err != nil {
		sd.t.Fatal(err)
	}
	if err := sd.s.Release(ctx, l); err != nil {
		sd.t.Fatal(err)
	}
	return a
}

// server serves sd with token tok ("" read-only) through httptest on loopback.
func (sd *seeded) server(tok string) (*Server, *httptest.Server) {
	sd.t.Helper()
	srv, err := New(Config{Store: sd.s, DSN: "postgres://once:sekrit@db/once", Token: tok})
	if err != nil {
		sd.t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	sd.t.Cleanup(ts.Close)
	return srv, ts
}

// jobServer is a server over sd's store with the token on and one daemon job, name, due daily:
// what the tests of the job controls and the fuzzers attack (no listener: callers serve its Handler).
func (sd *seeded) jobServer(name string) *Server {
	sd.t.Helper()
	srv, err := New(Config{Store: sd.s, Token: testToken, Jobs: func() []scheduler.Job {
		return []scheduler.Job{{Job: jobfile.Job{Name: name, Schedule: "@daily", Command: []string{"true"}}}}
	}})
	if err != nil {
		sd.t.Fatal(err)
	}
	return srv
}

func get(t *testing.T, ts *httptest.Server, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+path, nil)
	return do(t, req, hdr)
}

// do sends req with the headers hdr (name, value, …; "Host" sets the request's host) without
// following redirects, and returns the answer and its body.
func do(t *testing.T, req *http.Request, hdr []string) (*http.Response, string) {
	t.Helper()
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestReadsOpenOnLoopbackOnly(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts := sd.server(testToken)
	if resp, body := get(t, ts, "/api/v1/tasks"); resp.StatusCode != 200 || !strings.Contains(body, `"nightly"`) {
		t.Fatalf("loopback read: %d %s", resp.StatusCode, body)
	}
	// A page of another site that rebinds its name to 127.0.0.1 names its own host.
	if resp, body := get(t, ts, "/api/v1/tasks", "Host", "evil.example:8080"); resp.StatusCode != 401 || strings.Contains(body, "nightly") {
		t.Fatalf("rebinding read: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, ts, "/", "Host", "evil.example"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("rebinding page: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get(t, ts, "/api/v1/tasks", "Host", "evil.example", "Authorization", "Bearer "+testToken); resp.StatusCode != 200 {
		t.Fatalf("read with the token: %d", resp.StatusCode)
	}
	if resp, _ := get(t, ts, "/api/v1/tasks", "Host", "evil.example", "Authorization", "Bearer wrong"+testToken); resp.StatusCode != 401 {
		t.Fatalf("read with a wrong token: %d", resp.StatusCode)
	}
	// Beyond loopback every read needs the token, whatever the Host says.
	srv, _ := sd.server(testToken)
	srv.loopback = false
	ts2 := httptest.NewServer(srv.Handler())
	defer ts2.Close()
	if resp, _ := get(t, ts2, "/api/v1/tasks"); resp.StatusCode != 401 {
		t.Fatalf("beyond loopback without the token: %d", resp.StatusCode)
	}
}

func TestNoPasswordInPages(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts := sd.server("")
	for _, p := range []string{"/", "/timeline", "/review", "/leases", "/jobs", "/slot?task=nightly&slot=2026-12-01", "/api/v1/tasks"} {
		resp, body := get(t, ts, p)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
		if strings.Contains(body, "sekrit") {
			t.Errorf("%s shows the password", p)
		}
	}
}

func post(t *testing.T, ts *httptest.Server, path, ctype, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	return do(t, req, hdr)
}

// waiting seeds a slot whose last attempt is unknown (its holder vanished, a later holder took
// the lease): it waits for review.
func (sd *seeded) waiting(task, slot string) {
	sd.t.Helper()
	ctx := context.Background()
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "hostA", RunID: "run-a-" + task + "-" + slot, TTL: time.Millisecond})
	if err != nil {
		sd.t.Fatal(err)
	}
	if _, err := sd.s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: l.RunID, Number: 1, Holder: "hostA", Token: l.Token}); err != nil {
		sd.t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	l2, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "hostB", RunID: "run-b", TTL: time.Minute})
	if err != nil {
		sd.t.Fatal(err)
	}
	if _, err := sd.s.Abandon(ctx, task, l2.Token); err != nil {
		sd.t.Fatal(err)
	}
	if err := sd.s.Release(ctx, l2); err != nil {
		sd.t.Fatal(err)
	}
}

func TestResolveThroughTheAPI(t *testing.T) {
	sd := newSeeded(t)
	sd.waiting("sync", "2026-12-01")
	body := `{"task":"sync","slot":"2026-12-01","as":"failed","note":"checked: no rows written","by":"alice"}`

	_, ro := sd.server("")
	if resp, b := post(t, ro, "/api/v1/review/resolve", "application/json", body); resp.StatusCode != 403 || !strings.Contains(b, "read-only") {
		t.Fatalf("read-only server: %d %s", resp.StatusCode, b)
	}
	_, ts := sd.server(testToken)
	if resp, _ := post(t, ts, "/api/v1/review/resolve", "application/json", body); resp.StatusCode != 401 {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}
	auth := []string{"Authorization", "Bearer " + testToken}
	for _, c := range []struct{ body, want string }{
		{`{"task":"sync","slot":"2026-12-01","as":"maybe","note":"x","by":"alice"}`, "give succeeded"},
		{`{"task":"sync","slot":"2026-12-01","as":"failed","note":"","by":"alice"}`, "give a note"},
		{`{"task":"sync","slot":"2026-12-01","as":"failed","note":"x"}`, "give by"},
		{`{"task":"bad name!","slot":"2026-12-01","as":"failed","note":"x","by":"a"}`, "task"},
		{`{"task":"sync","extra":1}`, "not a JSON object"},
		// Taken only as written: encoding/json kept the last of two keys, matched "AS" to as, and
		// ignored what followed the object; each of these was recorded as succeeded.
		{`{"task":"sync","slot":"2026-12-01","as":"failed","AS":"succeeded","note":"x","by":"a"}`, "unknown field"},
		{`{"task":"sync","slot":"2026-12-01","as":"failed","as":"succeeded","note":"x","by":"a"}`, "given twice"},
		{`{"task":"sync","slot":"2026-12-01","as":"succeeded","note":"x","by":"a"} {"as":"failed"}`, "follows the object"},
		{`{"task":"sync","slot":"2026-12-01","as":"succeeded","note":"x","by":"a"} trailing`, "follows the object"},
		{`{"task":"sync","slot":"2026-12-01","as":1,"note":"x","by":"a"}`, "give a string"},
		{`["sync"]`, "not a JSON object"},
	} {
		if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", c.body, auth...); resp.StatusCode != 400 || !strings.Contains(b, c.want) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, b)
		}
	}
	if st, _ := sd.s.Slot(context.Background(), "sync", "2026-12-01"); !st.Waiting {
		t.Fatal("a refused decision changed the slot")
	}
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", body, auth...); resp.StatusCode != 200 {
		t.Fatalf("resolve: %d %s", resp.StatusCode, b)
	}
	st, _ := sd.s.Slot(context.Background(), "sync", "2026-12-01")
	if st.Waiting || st.Last.Resolution == nil || st.Last.Resolution.By != "alice via once serve" || st.Last.Resolution.Note != "checked: no rows written" {
		t.Fatalf("after resolve: %+v %+v", st, st.Last.Resolution)
	}
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", body, auth...); resp.StatusCode != 409 || !strings.Contains(b, "nothing was recorded") {
		t.Fatalf("second resolve: %d %s", resp.StatusCode, b)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestResolveFormNeedsSessionAndCSRF(t *testing.T) {
	sd := newSeeded(t)
	sd.waiting("sync", "2026-12-01")
	_, ts := sd.server(testToken)
	form := url.Values{"task": {"sync"}, "slot": {"2026-12-01"}, "as": {"succeeded"}, "note": {"done by hand"}, "by": {"bob"}}
	const ctype = "application/x-www-form-urlencoded"
	if resp, _ := post(t, ts, "/review", ctype, form.Encode()); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := post(t, ts, "/login", ctype, url.Values{"token": {"wrong-token-0000000"}, "next": {"/review"}}.Encode()); resp.StatusCode != 401 {
		t.Fatalf("login with a wrong token: %d", resp.StatusCode)
	}
	resp, _ := post(t, ts, "/login", ctype, url.Values{"token": {testToken}, "next": {"//evil.example/"}}.Encode())
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d, to %q (a next beyond this server must become /)", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Fatalf("session cookie %+v: want HttpOnly and SameSite=Strict", c)
			}
			cookie = c.Name + "=" + c.Value
		}
	}
	if strings.Contains(cookie, testToken) {
		t.Fatal("the cookie holds the token itself")
	}
	_, page := get(t, ts, "/review", "Cookie", cookie)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the review page: %s", page)
	}
	if resp, _ := post(t, ts, "/review", ctype, form.Encode(), "Cookie", cookie); resp.StatusCode != 403 {
		t.Fatalf("without the CSRF token: %d", resp.StatusCode)
	}
	form.Set("csrf", m[1])
	if resp, _ := post(t, ts, "/review", ctype, form.Encode(), "Cookie", cookie, "Origin", "https://evil.example"); resp.StatusCode != 403 {
		t.Fatalf("from another origin: %d", resp.StatusCode)
	}
	if resp, _ := post(t, ts, "/review", ctype, form.Encode(), "Cookie", cookie, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != 403 {
		t.Fatalf("cross-site: %d", resp.StatusCode)
	}
	if st, _ := sd.s.Slot(context.Background(), "sync", "2026-12-01"); !st.Waiting {
		t.Fatal("a refused form changed the slot")
	}
	resp, b := post(t, ts, "/review", ctype, form.Encode(), "Cookie", cookie, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the form: %d %s", resp.StatusCode, b)
	}
	// The answer's banner shows on the page the form leads to, and only there: a link made
	// elsewhere with its own words shows none.
	const banner = "task sync slot 2026-12-01 attempt 1: succeeded"
	if _, page := get(t, ts, resp.Header.Get("Location")); !strings.Contains(page, banner) {
		t.Fatalf("the page after the form does not say what was recorded: %s", page)
	}
	if _, page := get(t, ts, "/review?done="+url.QueryEscape("task payments slot 2026-12-01 attempt 1: succeeded")); strings.Contains(page, "task payments") {
		t.Fatal("a forged done= link puts its words in the banner")
	}
	st, _ := sd.s.Slot(context.Background(), "sync", "2026-12-01")
	if st.Waiting || st.Last.Resolution == nil || st.Last.Resolution.As != store.Succeeded {
		t.Fatalf("after the form: %+v", st)
	}
	if _, page := get(t, ts, "/slot?task=sync&slot=2026-12-01"); !strings.Contains(page, "bob via once serve") || !strings.Contains(page, "done by hand") {
		t.Fatal("the slot page does not show the decision (who, why)")
	}
}

// TestLoginStaysOnThisServer: a next= that a browser would read as another site (a tab or a
// newline it drops, a backslash it reads as a slash, a scheme) leads to "/".
func TestLoginStaysOnThisServer(t *testing.T) {
	for in, want := range map[string]string{
		"/review": "/review", "/slot?task=a&slot=b": "/slot?task=a&slot=b", "": "/", "review": "/",
		"//evil.example": "/", "/\\evil.example": "/", "/\t/evil.example": "/", "/\n/evil.example": "/",
		"/\r/evil.example": "/", "/\x00/evil.example": "/", "/\x7f/x": "/", "https://evil.example/": "/",
		"/a\\b": "/", "/%09/evil.example": "/%09/evil.example", // escaped: a path on this server
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
	sd := newSeeded(t)
	_, ts := sd.server(testToken)
	resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", url.Values{"token": {testToken}, "next": {"/\t/evil.example"}}.Encode())
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login with a tab in next: %d, to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestAPIRefusesBadInput(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts := sd.server("")
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/api/v1/history?limit=0", 400, "limit"},
		{"/api/v1/history?limit=x", 400, "limit"},
		{"/api/v1/history?kind=bogus", 400, "kind"},
		{"/api/v1/history?before=garbage", 400, "cursor"},
		{"/api/v1/history?from=yesterday", 400, "RFC 3339"},
		{"/api/v1/history?task=a%20b", 400, "task"},
		{"/api/v1/slot", 400, "task"},
		{"/api/v1/slot?task=nightly&slot=1999-01-01", 404, "nothing"},
		{"/api/v1/timeline?from=2026-12-01T00:00:00Z&to=2026-11-01T00:00:00Z", 400, "from before to"},
		{"/api/v1/nothing", 404, "docs/api.md"},
		{"/api/v1/jobs/x/pause", 405, "send it as POST"}, // a change is a POST
	} {
		resp, body := get(t, ts, c.path)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
		}
		if c.status == 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: error is %s, not JSON", c.path, resp.Header.Get("Content-Type"))
		}
	}
}

func TestHistoryPagesAndFilters(t *testing.T) {
	sd := newSeeded(t)
	for i := 0; i < 7; i++ {
		h := "hostA"
		if i%2 == 1 {
			h = "hostB"
		}
		sd.run("t", "s"+string(rune('0'+i)), h, store.Succeeded)
		if err := sd.s.Record(context.Background(), store.Event{Task: "t", Slot: "s", Kind: store.Busy, Holder: "hostC"}); err != nil {
			t.Fatal(err)
		}
	}
	_, ts := sd.server("")
	seen := map[string]bool{}
	next, pages := "", 0
	for {
		_, body := get(t, ts, "/api/v1/history?kind=attempts&limit=3&before="+url.QueryEscape(next))
		var p HistoryPage
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err, body)
		}
		for _, e := range p.Entries {
			if !e.State.IsAttempt() || seen[e.RunID] {
				t.Fatalf("entry %+v: an event, or seen twice", e)
			}
			seen[e.RunID] = true
		}
		pages++
		if next = p.Next; next == "" || pages > 10 {
			break
		}
	}
	if len(seen) != 7 {
		t.Fatalf("pages gave %d attempts, want 7", len(seen))
	}
	_, body := get(t, ts, "/api/v1/history?holder=hostB")
	var p HistoryPage
	_ = json.Unmarshal([]byte(body), &p)
	if len(p.Entries) != 3 {
		t.Fatalf("holder=hostB: %d entries, want 3", len(p.Entries))
	}
	_, body = get(t, ts, "/api/v1/history?kind=busy&limit=500")
	_ = json.Unmarshal([]byte(body), &p)
	if len(p.Entries) != 7 || p.Next != "" {
		t.Fatalf("kind=busy: %d entries, next %q", len(p.Entries), p.Next)
	}
}

func TestOverlapsNameBothHolders(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	bars := []Bar{
		{RunID: "c", Holder: "hostC", Start: t0.Add(3 * time.Hour), End: t0.Add(4 * time.Hour)},
		{RunID: "a", Holder: "hostA", Start: t0, End: t0.Add(2 * time.Hour)},
		{RunID: "b", Holder: "hostB", Start: t0.Add(time.Hour), End: t0.Add(90 * time.Minute)},
	}
	ov := overlaps("sync", bars)
	if len(ov) != 1 || ov[0].A.Holder != "hostA" || ov[0].B.Holder != "hostB" {
		t.Fatalf("overlaps %+v", ov)
	}
	for _, b := range bars {
		if (len(b.Overlap) > 0) != (b.RunID != "c") {
			t.Errorf("bar %s overlap %v", b.RunID, b.Overlap)
		}
	}
	seats := []Bar{ // once run --limit: seats' attempts of different slots may overlap, not of one slot
		{RunID: "s1", Slot: "x", Seats: 2, Start: t0, End: t0.Add(2 * time.Hour)},
		{RunID: "s2", Slot: "y", Seats: 2, Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour)},
		{RunID: "e", Slot: "z", Start: t0.Add(150 * time.Minute), End: t0.Add(4 * time.Hour)},
	}
	if ov := overlaps("wide", seats); len(ov) != 1 || ov[0].A.RunID != "s2" || ov[0].B.RunID != "e" {
		t.Fatalf("overlaps of seats %+v: want only s2 with the exclusive e", ov)
	}
	if d, tot := progress("3/10"); d != 3 || tot != 10 {
		t.Errorf("progress 3/10: %v/%v", d, tot)
	}
	for _, p := range []string{"", "x/y", "5", "1/0", "-1/3"} {
		if _, tot := progress(p); tot != 0 {
			t.Errorf("progress %q read as a fraction", p)
		}
	}
}

func TestLeasesShowProgress(t *testing.T) {
	sd := newSeeded(t)
	a := sd.run("long", "s1", "hostA", store.Running)
	n := int64(42)
	if err := sd.s.Report(context.Background(), a.RunID, a.Token, store.Report{Records: &n, Progress: "4/10"}); err != nil {
		t.Fatal(err)
	}
	_, ts := sd.server("")
	_, body := get(t, ts, "/api/v1/leases")
	var got struct{ Leases []LeaseRow }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Leases) != 1 || got.Leases[0].Done != 4 || got.Leases[0].Total != 10 || got.Leases[0].Records != 42 || got.Leases[0].Slot != "s1" {
		t.Fatalf("leases %s", body)
	}
	if _, page := get(t, ts, "/leases"); !strings.Contains(page, `<progress max="10" value="4">`) {
		t.Fatalf("no progress bar in %s", page)
	}
	if _, page := get(t, ts, "/"); !strings.Contains(page, "s-running") {
		t.Fatal("the overview does not show the task running")
	}
	// Without the list of running attempts, the attempt is read from the task's newest entries.
	srv, err := New(Config{Store: failingRunning{sd.s}, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := srv.leases(t.Context())
	if err != nil || len(rows) != 1 || rows[0].Slot != "s1" || rows[0].Records != 42 || rows[0].Done != 4 {
		t.Fatalf("leases without the running list: %+v, %v", rows, err)
	}
	// The leases never read history by kind (a kind=running read walked the task's history past
	// its other entries); with the running list, they read no history at all.
	for _, rs := range []*historyRecorder{{Store: sd.s, list: true}, {Store: failingRunning{sd.s}}} {
		srv, err := New(Config{Store: rs, DSN: "sqlite:///x.db"})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := srv.leases(t.Context())
		if err != nil || len(rows) != 1 || rows[0].Slot != "s1" || rows[0].Done != 4 {
			t.Fatalf("leases (running list %v): %+v, %v", rs.list, rows, err)
		}
		for _, q := range rs.reads {
			if q.Kind != "" || rs.list {
				t.Errorf("leases (running list %v) read history %+v", rs.list, q)
			}
		}
	}
}

// TestHostileTextIsEscaped: holders, notes and slots are people's and programs' text; none of it
// becomes markup on any page.
func TestHostileTextIsEscaped(t *testing.T) {
	sd := newSeeded(t)
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	a := sd.run("t", "s1", evil, store.Running)
	if err := sd.s.Report(context.Background(), a.RunID, a.Token, store.Report{Note: evil, Progress: evil, Checkpoint: evil}); err != nil {
		t.Fatal(err)
	}
	sd.waiting("w", "s2")
	if err := sd.s.Record(context.Background(), store.Event{Task: "w", Slot: "s2", Kind: store.Busy, Holder: evil, Note: evil}); err != nil {
		t.Fatal(err)
	}
	_, ts := sd.server(testToken)
	for _, p := range []string{"/", "/timeline", "/review", "/leases", "/slot?task=t&slot=s1", "/slot?task=w&slot=s2", "/?after=" + url.QueryEscape(evil), "/login?next=" + url.QueryEscape(evil)} {
		_, body := get(t, ts, p)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s: hostile text became markup", p)
		}
	}
	if _, body := get(t, ts, "/slot?task=t&slot=s1"); !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the slot page does not show the hostile holder as text")
	}
}

// TestSessionEnds: a session cookie lasts sessionTTL by the server's clock, and its end cannot be
// moved by editing the cookie.
func TestSessionEnds(t *testing.T) {
	sd := newSeeded(t)
	now := time.Now()
	srv, err := New(Config{Store: sd.s, Token: testToken, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	srv.loopback = false // every read needs the token or a session
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, _ := post(t, ts, "/login", "application/x-www-form-urlencoded", url.Values{"token": {testToken}}.Encode())
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("no session cookie")
	}
	if resp, _ := get(t, ts, "/api/v1/tasks", "Cookie", cookie.Name+"="+cookie.Value); resp.StatusCode != 200 {
		t.Fatalf("with the session: %d", resp.StatusCode)
	}
	exp, m, _ := strings.Cut(cookie.Value, ".")
	later := strconv.FormatInt(now.Add(48*time.Hour).Unix(), 10)
	if resp, _ := get(t, ts, "/api/v1/tasks", "Cookie", cookie.Name+"="+later+"."+m); resp.StatusCode != 401 {
		t.Fatalf("a cookie with its end moved: %d", resp.StatusCode)
	}
	now = now.Add(sessionTTL + time.Second)
	if resp, _ := get(t, ts, "/api/v1/tasks", "Cookie", cookie.Name+"="+exp+"."+m); resp.StatusCode != 401 {
		t.Fatalf("an ended session: %d", resp.StatusCode)
	}
}

// TestKeysLookup: GET /api/v1/keys shows a scope's keys by state, an effect whose claimant is gone
// as unknown, and never a stored result; /api/v1/scopes and /keys list the scopes with their
// counts, a scope's keys a page at a time, and its unknown ones.
func TestKeysLookup(t *testing.T) {
	sd := newSeeded(t)
	ctx := context.Background()
	ks := sd.s.(store.Keys)
	if _, err := ks.Claim(ctx, store.ClaimRequest{Scope: "payments", Keys: []string{"done-1"}}); err != nil {
		t.Fatal(err)
	}
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: "pay", Holder: "h", RunID: "r1", TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Claim(ctx, store.ClaimRequest{Scope: "payments", Keys: []string{"pending-1"}, Pending: true,
		Claimant: store.Claimant{Task: "pay", RunID: "r1", Token: l.Token}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the claimant's lease expires: its key's outcome is unknown
	_, ts := sd.server("")
	_, body := get(t, ts, "/api/v1/keys?scope=payments&key=done-1&key=pending-1&key=never")
	var got struct{ Keys []store.Key }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err, body)
	}
	states := map[string]store.KeyState{}
	for _, k := range got.Keys {
		states[k.Key] = k.State
	}
	if len(got.Keys) != 2 || states["done-1"] != store.KeyDone || states["pending-1"] != store.KeyUnknown {
		t.Fatalf("keys %s", body)
	}
	for _, c := range []string{"/api/v1/keys?key=x", "/api/v1/keys?scope=payments&key=" + url.QueryEscape("a\x00b"),
		"/api/v1/keys?scope=payments&state=lost", "/api/v1/keys?scope=payments&limit=0", "/api/v1/keys?scope=payments&limit=5001",
		"/api/v1/scopes?limit=51", "/api/v1/scopes?limit=x", "/keys?scope=payments&state=lost", "/keys?scope=payments&key=done-1"} {
		if resp, b := get(t, ts, c); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s", c, resp.StatusCode, b)
		}
	}

	// The scopes, counted by state; a scope's unknown keys; its keys a page at a time.
	hostile := "<b>x</b>'"
	many := make([]string, 30)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	for _, sc := range []string{"many", hostile} {
		if _, err := ks.Claim(ctx, store.ClaimRequest{Scope: sc, Keys: many}); err != nil {
			t.Fatal(err)
		}
	}
	_, body = get(t, ts, "/api/v1/scopes?limit=2")
	var sp ScopesPage
	if err := json.Unmarshal([]byte(body), &sp); err != nil || len(sp.Scopes) != 2 || sp.Next == "" || sp.CountMax != countMax {
		t.Fatalf("scopes page of 2: %v %s", err, body)
	}
	_, body = get(t, ts, "/api/v1/scopes?cursor="+url.QueryEscape(sp.Next))
	var rest ScopesPage
	if err := json.Unmarshal([]byte(body), &rest); err != nil || len(rest.Scopes) != 1 || rest.Next != "" {
		t.Fatalf("scopes, the next page: %v %s", err, body)
	}
	counts := map[string]store.ScopeCount{}
	for _, c := range append(sp.Scopes, rest.Scopes...) {
		counts[c.Scope] = c
	}
	if c := counts["payments"]; c.Done != 1 || c.Unknown != 1 || c.Pending != 0 || c.Capped {
		t.Fatalf("payments counted %+v", c)
	}
	if c := counts["many"]; c.Done != 30 {
		t.Fatalf("many counted %+v", c)
	}
	_, body = get(t, ts, "/api/v1/keys?scope=payments&state=unknown")
	var kp KeysPage
	if err := json.Unmarshal([]byte(body), &kp); err != nil || len(kp.Keys) != 1 || kp.Keys[0].Key != "pending-1" || kp.Read != 2 || kp.Next != "" {
		t.Fatalf("unknown keys of payments: %v %s", err, body)
	}
	seen := map[string]bool{}
	for cursor, pages := "", 0; ; pages++ {
		_, body = get(t, ts, "/api/v1/keys?scope=many&limit=7&cursor="+url.QueryEscape(cursor))
		var p KeysPage
		if err := json.Unmarshal([]byte(body), &p); err != nil || pages > 10 {
			t.Fatalf("keys of many, page %d: %v %s", pages, err, body)
		}
		for _, k := range p.Keys {
			seen[k.Key] = true
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if len(seen) != 30 {
		t.Fatalf("keys of many in pages of 7: %d of 30", len(seen))
	}
	_, page := get(t, ts, "/keys")
	for _, want := range []string{`href="/keys?scope=payments&amp;state=unknown"`, "&lt;b&gt;x&lt;/b&gt;&#39;", ">30<"} {
		if !strings.Contains(page, want) {
			t.Errorf("/keys lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, hostile) {
		t.Errorf("/keys shows a scope's name unescaped")
	}
	_, page = get(t, ts, "/keys?scope=payments&state=unknown")
	for _, want := range []string{"pending-1", "once keys claim --scope payments --reclaim-unknown KEY"} {
		if !strings.Contains(page, want) {
			t.Errorf("/keys?scope=payments&state=unknown lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, "done-1") {
		t.Errorf("the unknown keys of payments show a done key")
	}
}

// historyRecorder is a real store that keeps the History queries made; list says whether it lists
// the attempts running (store.RunningLister) as the store does.
type historyRecorder struct {
	store.Store
	list  bool
	reads []store.HistoryQuery
}

func (h *historyRecorder) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	h.reads = append(h.reads, q)
	return h.Store.History(ctx, q)
}

func (h *historyRecorder) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	if l, ok := h.Store.(store.RunningLister); ok && h.list {
		return l.RunningAttempts(ctx, limit)
	}
	return store.RunningList{}, store.ErrUnavailable
}

// A page of one task, slot or scope names it in its title (tabs, history, screen readers named
// every run detail "slot"), and the timeline's arrows say where they go.
func TestPageTitlesNameTheirSubject(t *testing.T) {
	sd := newSeeded(t)
	sd.run("nightly", "2026-12-01", "hostA", store.Succeeded)
	_, ts := sd.server("")
	for p, want := range map[string]string{
		"/slot?task=nightly&slot=2026-12-01": "<title>nightly · 2026-12-01 · once</title>",
		"/timeline?task=nightly":             "<title>Timeline: nightly · once</title>",
		"/timeline":                          `aria-label="Earlier"`,
	} {
		if _, body := get(t, ts, p); !strings.Contains(body, want) {
			t.Errorf("%s: no %s in\n%.600s", p, want, body)
		}
	}
}
