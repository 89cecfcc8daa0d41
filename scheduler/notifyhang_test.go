package scheduler_test

import (
	"net/http"
	"net/http/httptest"
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
	time.Sleep(6 * time.Second)
	n.stop()
	runs := 0
	for _, e := range f.history("hangy") {
		if e.State == store.Succeeded {
			runs++
			if lag := e.StartedAt.Sub(slotTime(t, e.Slot)); lag > 2*time.Second {
				t.Errorf("slot %s began %s after its fire time", e.Slot, lag)
			}
		}
	}
	if runs < 4 {
		t.Fatalf("%d runs in 6 s of an @every 1s job", runs)
	}
}

func slotTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
