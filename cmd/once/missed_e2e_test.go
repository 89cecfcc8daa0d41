package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// seedMissed records missed events through the library, as once daemon does (no command records
// one): two slots of task nightly, one of task hourly, and one of task late that then runs (a
// backfill), by the real binary.
func seedMissed(t *testing.T, h *env, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, e := range []store.Event{
		{Task: "nightly", Slot: "2026-11-28T02:00:00Z", Kind: store.Missed, Holder: "node-2", Note: "fire time passed 3h ago, outside --catch-up 1h"},
		{Task: "hourly", Slot: "2026-11-29T01:00:00Z", Kind: store.Missed, Holder: "node-2", Note: "no node was up"},
		{Task: "nightly", Slot: "2026-11-29T02:00:00Z", Kind: store.Missed, Holder: "node-1", Note: "fire time passed 5h ago, outside --catch-up 1h"},
		{Task: "late", Slot: "s1", Kind: store.Missed, Holder: "node-1", Note: "no node was up"},
	} {
		if err := s.Record(ctx, e); err != nil {
			t.Fatalf("Record(%+v): %v", e, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if r := h.run("run", "--task", "late", "--slot", "s1", "--", "true"); r.code != 0 {
		t.Fatalf("run of the missed slot late/s1: %d %s", r.code, r.stderr)
	}
}

// TestMissedShown: missed events are listed by history --kind missed (text and JSON, paged), and
// shown by status (text and --json) and doctor (a warning per task with its slots not run since
// and the backfill that runs them), on every store.
func TestMissedShown(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dsn := b.isolated()
			h := host(t, "node-1", dsn)
			seedMissed(t, h, dsn)
			checkMissedHistory(t, h)
			checkMissedStatus(t, h)
			r := h.run("doctor")
			says(t, "doctor", r,
				"WARN  missed      task nightly: 2 slots missed in the last 30 days and not run since (2026-11-28T02:00:00Z … 2026-11-29T02:00:00Z)",
				"once backfill --task nightly --from 2026-11-28T02:00:00Z --to 2026-11-29T02:00:00Z --store ",
				"(the newest note: fire time passed 5h ago, outside --catch-up 1h)",
				"WARN  missed      task hourly: 1 slot missed in the last 30 days and not run since (2026-11-29T01:00:00Z)")
			if r.code != 1 || strings.Contains(r.stdout, "task late:") {
				t.Errorf("doctor: exit %d (want 1), and the slot run since not left out:\n%s", r.code, r.stdout)
			}
			var rep struct{ Findings []store.Finding }
			r = h.run("doctor", "--json")
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
			}
			n := 0
			for _, f := range rep.Findings {
				if f.Check == "missed" && f.Level == store.LevelWarn {
					n++
				}
			}
			if n != 2 {
				t.Errorf("doctor --json has %d missed warnings, want 2 (nightly, hourly):\n%s", n, r.stdout)
			}
		})
	}
}

// says checks that the output of what, r, has each of wants.
func says(t *testing.T, what string, r result, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, r.stdout)
		}
	}
}

func checkMissedHistory(t *testing.T, h *env) {
	t.Helper()
	r := h.run("history", "--kind", "missed", "--json")
	var es []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &es); r.code != 0 || err != nil {
		t.Fatalf("history --kind missed --json: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	var got []string
	for _, e := range es {
		if e["state"] != "missed" || e["ended_at"] != nil || e["attempt"] != float64(0) || e["holder"] == "" || e["note"] == "" {
			t.Errorf("a missed entry: %v", e)
		}
		got = append(got, e["task"].(string)+"/"+e["slot"].(string))
	}
	if want := "late/s1 nightly/2026-11-29T02:00:00Z hourly/2026-11-29T01:00:00Z nightly/2026-11-28T02:00:00Z"; strings.Join(got, " ") != want {
		t.Errorf("history --kind missed: %s, want %s", strings.Join(got, " "), want)
	}
	// Paged: the second page of two goes on through the same filter.
	r = h.run("history", "--kind", "missed", "--limit", "2")
	const next = "once: more entries: add --before "
	if r.code != 0 || !strings.Contains(r.stdout, "nightly  2026-11-29T02:00:00Z") || !strings.Contains(r.stderr, next) {
		t.Fatalf("history --kind missed --limit 2: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cursor := strings.Fields(strings.TrimPrefix(strings.TrimSpace(r.stderr), next))[0]
	r = h.run("history", "--kind", "missed", "--limit", "2", "--before", cursor)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 3 ||
		!strings.Contains(lines[1], "hourly") || !strings.Contains(lines[2], "nightly  2026-11-28T02:00:00Z") ||
		!strings.Contains(lines[2], "missed") || strings.Contains(r.stdout, "succeeded") {
		t.Fatalf("the second page of history --kind missed: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := h.run("history", "--kind", "succeeded", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"task": "late"`) || strings.Contains(r.stdout, "missed") {
		t.Errorf("history --kind succeeded: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := h.run("history", "--kind", "mised"); r.code != 64 || !strings.Contains(r.stderr, `history kind "mised"`) {
		t.Errorf("history --kind mised: %d %s, want 64 naming it", r.code, r.stderr)
	}
}

func checkMissedStatus(t *testing.T, h *env) {
	t.Helper()
	r := h.run("status")
	if r.code != 0 {
		t.Errorf("status: exit %d\n%s", r.code, r.stderr)
	}
	says(t, "status", r, "MISSED IN THE LAST 7 DAYS (4)", "nightly  2026-11-29T02:00:00Z", "hourly   2026-11-29T01:00:00Z",
		"no node was up", "once backfill --task TASK --from SLOT --to SLOT")
	var st struct {
		Missed []map[string]any `json:"missed"`
	}
	r = h.run("status", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || len(st.Missed) != 4 ||
		st.Missed[1]["task"] != "nightly" || st.Missed[1]["slot"] != "2026-11-29T02:00:00Z" || st.Missed[1]["state"] != "missed" ||
		st.Missed[1]["note"] != "fire time passed 5h ago, outside --catch-up 1h" || st.Missed[1]["started_at"] == nil {
		t.Errorf("status --json: %d %v\n%s", r.code, err, r.stdout)
	}
}

// TestMissedNone: with no missed slot status has no MISSED section and "missed": [] in --json, and
// doctor's missed finding is OK.
func TestMissedNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "ok", "--per", "day", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	if r := e.run("status"); r.code != 0 || strings.Contains(r.stdout, "MISSED") {
		t.Errorf("status: %d\n%s", r.code, r.stdout)
	}
	if r := e.run("status", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"missed": []`) {
		t.Errorf("status --json: %d\n%s", r.code, r.stdout)
	}
	if r := e.run("doctor"); r.code != 0 || !strings.Contains(r.stdout, "OK    missed      no slot missed in the last 30 days") {
		t.Errorf("doctor: %d\n%s", r.code, r.stdout)
	}
}
