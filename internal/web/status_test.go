package web

import (
	"testing"

	"github.com/once-run/once/store"
)

// A person's resolution of a task's last attempt is its status on the overview: an unknown
// attempt resolved as succeeded is done, one resolved as failed is failed.
func TestStatusFollowsResolution(t *testing.T) {
	for _, c := range []struct {
		state store.State
		as    store.State
		want  string
	}{
		{store.Unknown, "", statusUnknown},
		{store.Unknown, store.Succeeded, statusOK},
		{store.Unknown, store.Failed, statusFailed},
		{store.Failed, store.Succeeded, statusOK},
		{store.Failed, "", statusFailed},
		{store.Succeeded, "", statusOK},
	} {
		a := &store.Attempt{State: c.state}
		if c.as != "" {
			a.Resolution = &store.Resolution{As: c.as, By: "ops"}
		}
		if got := status(TaskRow{Last: a}); got != c.want {
			t.Errorf("last attempt %s resolved as %q: status %s, want %s", c.state, c.as, got, c.want)
		}
	}
}

// A task's last success: its newest succeeded attempt, whether it is on the overview's page of the
// task's newest entries (found there, no second read) or older than the page.
func TestLastSuccess(t *testing.T) {
	sd := newSeeded(t)
	okA := sd.run("a", "s1", "h", store.Succeeded)
	sd.run("a", "s2", "h", store.Failed)
	sd.run("b", "s1", "h", store.Failed)
	okC := sd.run("c", "s0", "h", store.Succeeded)
	for i := range 2*trendLen + 1 {
		sd.run("c", "f"+string(rune('a'+i)), "h", store.Failed)
	}
	srv, _ := sd.server("")
	for _, c := range []struct {
		task string
		want *store.Attempt
	}{{"a", &okA}, {"b", nil}, {"c", &okC}} {
		row, err := srv.taskRow(t.Context(), c.task)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want == nil && row.LastSuccess != nil:
			t.Errorf("%s: last success %v, want none", c.task, row.LastSuccess)
		case c.want != nil && (row.LastSuccess == nil || !row.LastSuccess.Equal(*c.want.EndedAt)):
			t.Errorf("%s: last success %v, want %v", c.task, row.LastSuccess, c.want.EndedAt)
		}
	}
}
