package web

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// TestSlotEnvIsWhatTheCommandSaw: the run detail's environment names each variable as once gave it
// to the command (once.Run.Env), with its value; it showed ONCE_TOKEN, a name no command ever got,
// for ONCE_FENCING_TOKEN.
func TestSlotEnvIsWhatTheCommandSaw(t *testing.T) {
	sd := newSeeded(t)
	a := sd.run("nightly", "2026-12-01", "hostA", store.Failed)
	_, ts := sd.server("")

	resp, b := get(t, ts, "/api/v1/slot?task=nightly&slot=2026-12-01")
	if resp.StatusCode != 200 {
		t.Fatalf("slot: %d %s", resp.StatusCode, b)
	}
	var d SlotDetail
	if err := json.Unmarshal([]byte(b), &d); err != nil {
		t.Fatal(err)
	}
	env := d.Env[a.RunID]
	if len(env) == 0 {
		t.Fatalf("no env for run %s: %s", a.RunID, b)
	}
	run := once.Run{Task: a.Task, Slot: a.Slot, RunID: a.RunID, Attempt: a.Number, Token: a.Token}
	saw := map[string]string{}
	for _, kv := range run.Env() {
		k, v, _ := strings.Cut(kv, "=")
		saw[k] = v
	}
	for k, v := range env {
		if got, ok := saw[k]; !ok {
			t.Errorf("env shows %s, which the command never got (it got %v)", k, run.Env())
		} else if got != v {
			t.Errorf("env shows %s=%s, the command got %s=%s", k, v, k, got)
		}
	}
	if env["ONCE_FENCING_TOKEN"] == "" {
		t.Errorf("env %v: want ONCE_FENCING_TOKEN, the attempt's token", env)
	}

	_, page := get(t, ts, "/slot?task=nightly&slot=2026-12-01")
	if !strings.Contains(page, "ONCE_FENCING_TOKEN=") || strings.Contains(page, "ONCE_TOKEN=") {
		t.Errorf("run detail page: want ONCE_FENCING_TOKEN= and no ONCE_TOKEN=")
	}
}
