package scheduler_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// A ping URL that never answers does not hold the job: its slots still run at their fire times
// (before, each launch waited up to 5 s for its pings, the next slot waited behind it, and the
// job fell further behind with every slot while a queue of slots grew on the node).
func TestHangingPingDoesNotDelayTheNextSlot(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	f := newFleet(t, 1)
	j := scheduler.Job{Job: jobfile.Job{Name: "hangy", Schedule: "@every 1s", TZ: "UTC",
		Command: []string{"true"}, Ping: srv.URL + "/uuid"}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	time.Sleep(9 * time.Second)
	n.stop()
	// Held by its pings, each launch lasted 5 s more than its command: two runs began at least 5 s
	// apart. Free of them, the next run begins at the next fire (a second later, more under load).
	var starts []time.Time
	for _, e := range f.history("hangy") {
		if e.State == store.Succeeded {
			starts = append(starts, e.StartedAt)
		}
	}
	slices.SortFunc(starts, time.Time.Compare)
	closest := time.Duration(1 << 62)
	for i := 1; i < len(starts); i++ {
		closest = min(closest, starts[i].Sub(starts[i-1]))
	}
	if len(starts) < 2 || closest >= 4*time.Second {
		t.Fatalf("%d runs in 9 s of an @every 1s job, the closest two %s apart: the launches waited for their pings", len(starts), closest)
	}
}
