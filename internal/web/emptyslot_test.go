package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// TestEmptySlotShowsItsOwnEntries: the slot "" (a task run without --per, --schedule or --slot) is
// a slot like any other on its run detail; a HistoryQuery's Slot "" reads every slot, and the page
// showed the task's attempts of other slots as its own, and a slot "" never run as a slot with
// history (200, not 404).
func TestEmptySlotShowsItsOwnEntries(t *testing.T) {
	sd := newSeeded(t)
	sd.run("mix", "", "hostA", store.Succeeded)
	sd.run("mix", "2026-12-01", "hostB", store.Failed)
	sd.run("daily", "2026-12-01", "hostC", store.Succeeded)
	_, ts := sd.server("")

	resp, b := get(t, ts, "/api/v1/slot?task=mix&slot=")
	if resp.StatusCode != 200 {
		t.Fatalf("slot \"\": %d %s", resp.StatusCode, b)
	}
	var d SlotDetail
	if err := json.Unmarshal([]byte(b), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.History) != 1 || d.History[0].Slot != "" || d.History[0].Holder != "hostA" {
		t.Fatalf("slot \"\"'s history: %+v, want hostA's attempt alone", d.History)
	}
	if _, page := get(t, ts, "/slot?task=mix&slot="); strings.Contains(page, "hostB") {
		t.Fatal("the run detail of slot \"\" shows hostB's attempt of slot 2026-12-01")
	}
	if resp, b := get(t, ts, "/api/v1/slot?task=daily&slot="); resp.StatusCode != 404 {
		t.Fatalf("a slot \"\" never run: %d %s, want 404", resp.StatusCode, b)
	}
}

// TestSlotReadsTheNewestTailsOnly: a slot retried all night has up to 200 attempts on its run
// detail, each with a tail of up to store.MaxKeyResult: reading them all made a 100 MB page and a
// gigabyte of allocations a request. The newest slotTails are read; the others are counted.
func TestSlotReadsTheNewestTailsOnly(t *testing.T) {
	sd := newSeeded(t)
	ctx := context.Background()
	k := sd.s.(store.Keys)
	const n = slotTails + 5
	for i := 0; i < n; i++ {
		a := sd.run("retry", "2026-12-01", fmt.Sprintf("h%d", i), store.Failed)
		if _, err := k.Claim(ctx, store.ClaimRequest{Scope: scheduler.OutputScope, Keys: []string{a.RunID}, Pending: true, Claimant: store.Claimant{RunID: a.RunID}}); err != nil {
			t.Fatal(err)
		}
		if err := k.Complete(ctx, scheduler.OutputScope, []string{a.RunID}, a.RunID, []byte("out of "+a.Holder)); err != nil {
			t.Fatal(err)
		}
	}
	_, ts := sd.server("")
	_, b := get(t, ts, "/api/v1/slot?task=retry&slot=2026-12-01")
	var d SlotDetail
	if err := json.Unmarshal([]byte(b), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Tails) != slotTails || d.TailsNotRead != n-slotTails || d.Tails[d.History[0].RunID] != fmt.Sprintf("out of h%d", n-1) {
		t.Fatalf("%d tails, %d not read, newest %q; want the newest %d read and %d counted", len(d.Tails), d.TailsNotRead, d.Tails[d.History[0].RunID], slotTails, n-slotTails)
	}
}

// TestChangeWithAnotherMethodIs405: GET on a POST call answered 404 "no such API call", though
// the call exists.
func TestChangeWithAnotherMethodIs405(t *testing.T) {
	sd := newSeeded(t)
	_, ts := sd.server(testToken)
	for _, p := range []string{"/api/v1/review/resolve", "/api/v1/jobs/nightly/pause"} {
		resp, b := get(t, ts, p)
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || !strings.Contains(b, "send it as POST") {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, b)
		}
	}
	if resp, _ := get(t, ts, "/api/v1/nosuch"); resp.StatusCode != 404 {
		t.Errorf("an unknown call: %d, want 404", resp.StatusCode)
	}
}

// TestReviewReadsTheFirstTailsOnly: the review queue reads the output tail of its first
// reviewTails slots; the others say it was not read (each is up to store.MaxKeyResult, and a
// page of the queue up to 500 slots).
func TestReviewReadsTheFirstTailsOnly(t *testing.T) {
	sd := newSeeded(t)
	ctx := context.Background()
	k := sd.s.(store.Keys)
	const n = reviewTails + 3
	for i := range n {
		task := fmt.Sprintf("rv%02d", i)
		sd.waiting(task, "2026-12-01")
		st, err := sd.s.Slot(ctx, task, "2026-12-01")
		if err != nil || st.Last == nil {
			t.Fatal(st, err)
		}
		id := st.Last.RunID
		if _, err := k.Claim(ctx, store.ClaimRequest{Scope: scheduler.OutputScope, Keys: []string{id}, Pending: true, Claimant: store.Claimant{RunID: id}}); err != nil {
			t.Fatal(err)
		}
		if err := k.Complete(ctx, scheduler.OutputScope, []string{id}, id, []byte("out of "+task)); err != nil {
			t.Fatal(err)
		}
	}
	_, ts := sd.server("")
	_, b := get(t, ts, "/api/v1/review?limit=100")
	var page struct {
		Reviews []Review `json:"review"`
	}
	if err := json.Unmarshal([]byte(b), &page); err != nil {
		t.Fatal(err, b)
	}
	read, notRead := 0, 0
	for _, r := range page.Reviews {
		switch {
		case r.Tail != "" && !r.TailNotRead:
			read++
		case r.Tail == "" && r.TailNotRead:
			notRead++
		}
	}
	if len(page.Reviews) != n || read != reviewTails || notRead != n-reviewTails {
		t.Fatalf("%d reviews, %d tails read, %d not read; want %d, %d, %d", len(page.Reviews), read, notRead, n, reviewTails, n-reviewTails)
	}
	if _, html := get(t, ts, "/review"); !strings.Contains(html, "on the slot&#39;s page") && !strings.Contains(html, "on the slot's page") {
		t.Error("the review page does not point to the slot's page for a tail not read")
	}
}
