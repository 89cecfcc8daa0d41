package scheduler_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// A start that accounts many jobs, each with more holes than it follows up (the older ones are
// recorded missed at once when no node holds the job's lease), reads the fleet's leases once, not
// once per job: each read lists every lease of the fleet, so 1,000 such jobs cost 1,000 lists.
// Hourly slots, a poll of a minute: nothing fires and no follow-up reads the leases meanwhile.
func TestStartReadsTheLeasesOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	const jobs, holes = 12, 12 // 12 holes: the newest 8 followed up, 4 recorded missed at once
	sp, _ := workJob("h", "@every 1h", nil).Spec()
	newest := sp.Prev(time.Now())
	old := sp.Prev(newest.Start.Add(-time.Duration(holes)*time.Hour - time.Nanosecond))
	w := &witness{}
	var js []scheduler.Job
	for i := range jobs {
		name := fmt.Sprintf("holes-%02d", i)
		for _, sl := range []string{old.Value, newest.Value} {
			if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: name, Slot: sl, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		// The slots between were queued as a catch-up (markQueued's claims) and dropped by a stop.
		var marks []string
		for sl := sp.Next(old.Start); sl.Start.Before(newest.Start); sl = sp.Next(sl.Start) {
			marks = append(marks, "queued "+name+" "+sl.Value)
		}
		if len(marks) != holes {
			t.Fatalf("%d holes, want %d", len(marks), holes)
		}
		if _, err := f.stores[0].(store.Keys).Claim(ctx, store.ClaimRequest{Scope: "once.scheduler.recorded", Keys: marks,
			Claimant: store.Claimant{RunID: "record test"}}); err != nil {
			t.Fatal(err)
		}
		j := workJob(name, "@every 1h", w.work(time.Millisecond))
		j.CatchUp, j.CatchUpMax = 30*time.Minute, 1
		js = append(js, j)
	}
	reads := &leaseReads{keyedStore: f.stores[0].(keyedStore)}
	f.stores[0] = reads
	f.start(0, scheduler.Config{Jobs: js, Poll: time.Minute})
	eventually(t, 60*time.Second, "every job's older holes recorded missed", func() bool {
		for _, j := range js {
			if count(f.history(j.Name), store.Missed, "waited on a node") < holes-8 {
				return false
			}
		}
		return true
	})
	if n := reads.n.Load(); n > 2 {
		t.Fatalf("the start read the leases %d times for %d jobs with holes; want once (twice if a poll passed)", n, jobs)
	}
}

// leaseReads counts the Leases calls.
type leaseReads struct {
	keyedStore
	n atomic.Int64
}

func (l *leaseReads) Leases(ctx context.Context) ([]store.Lease, error) {
	l.n.Add(1)
	return l.keyedStore.Leases(ctx)
}
