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
