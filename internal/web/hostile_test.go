package web

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
)

// The attacks of a hostile client on the server, found by attacking a real once serve with curl
// and Chromium.

// TestJobActionChecksWhoAndWhy: a pause's "by" becomes a name in the ledger (the pause request's
// claimant, shown by once status and the jobs page): it is checked as --by is, and its note as a
// note, instead of reaching the store with escape sequences, line breaks or NUL bytes.
func TestJobActionChecksWhoAndWhy(t *testing.T) {
	sd := newSeeded(t)
	srv, err := New(Config{Store: sd.s, Token: testToken, Jobs: func() []scheduler.Job {
		return []scheduler.Job{{Job: jobfile.Job{Name: "nightly", Schedule: "@daily", Command: []string{"true"}}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
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
}
