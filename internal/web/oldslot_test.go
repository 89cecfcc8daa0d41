package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A slot a Go program using an older once recorded ('/' in it: that once took any value) waits for
// review: the dashboard shows it, and its slot page and resolve must take it (slot.CheckValue
// refused them with 400, so nothing could decide it). A name never recorded is still refused.
func TestOlderOnceSlotNameResolves(t *testing.T) {
	sd := newSeeded(t)
	sd.waiting("sync", "2026/12/01")
	_, ts := sd.server(testToken)
	resp, err := http.Get(ts.URL + "/api/v1/slot?task=sync&slot=" + url.QueryEscape("2026/12/01"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("slot page of a recorded slot with a '/': %d", resp.StatusCode)
	}
	auth := []string{"Authorization", "Bearer " + testToken}
	never := `{"task":"sync","slot":"2026/12/02","as":"failed","note":"x","by":"alice"}`
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", never, auth...); resp.StatusCode != 400 || !strings.Contains(b, "'/'") {
		t.Fatalf("a '/' slot never recorded: %d %s", resp.StatusCode, b)
	}
	body := `{"task":"sync","slot":"2026/12/01","as":"failed","note":"checked","by":"alice"}`
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", body, auth...); resp.StatusCode != 200 {
		t.Fatalf("resolve: %d %s", resp.StatusCode, b)
	}
	if st, _ := sd.s.Slot(context.Background(), "sync", "2026/12/01"); st.Waiting {
		t.Fatal("still waiting for review")
	}
}
