package scheduler_test

import (
	"context"
	"fmt"
	"sync"
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
	const jobs = 12
	js := seedHoles(t, f, jobs)
	// A read of the leases is shared only by the accounts of jobs whose newest entry is older than
	// it by more than MaxClockOffset (2 s by default): entries just recorded may be a new holder's.
	time.Sleep(2500 * time.Millisecond)
	reads := &leaseReads{keyedStore: f.stores[0].(keyedStore)}
	f.stores[0] = reads
	f.start(0, scheduler.Config{Jobs: js, Poll: time.Minute})
	eventually(t, 60*time.Second, "every job's older holes recorded missed", func() bool {
		for _, j := range js {
			if count(f.history(j.Name), store.Missed, "waited on a node") < seededHoles-8 {
				return false
			}
		}
		return true
	})
	if n := reads.n.Load(); n > 2 {
		t.Fatalf("the start read the leases %d times for %d jobs with holes; want once (twice if a poll passed)", n, jobs)
	}
}

// A node that takes a job's lease after the read of the leases a start shares (and so records an
// attempt newer than that read) is seen: the older holes of that job, which it may have queued
// behind the slot it runs, are followed up, not recorded missed from the shared read.
func TestStartSeesALeaseTakenAfterTheSharedRead(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	js := seedHoles(t, f, 8)
	held := js[3].Name
	sp, _ := js[3].Spec()
	next := sp.Next(sp.Prev(time.Now()).Start).Value
	release, began, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	t.Cleanup(func() { close(release); <-done })
	var once1 sync.Once
	reads := &leaseReads{keyedStore: f.stores[0].(keyedStore)}
	inner := f.stores[0]
	reads.after = func() { // the first read, by the first job's account: then another node takes held's lease
		once1.Do(func() {
			go func() {
				_, err := once.Do(context.Background(), once.Options{Store: inner, Task: held, Slot: next, TTL: time.Minute},
					func(context.Context, *once.Run) error { close(began); <-release; return nil })
				done <- err
			}()
			<-began
		})
	}
	f.stores[0] = reads
	f.start(0, scheduler.Config{Jobs: js, Poll: time.Minute})
	last := js[len(js)-1].Name // accounts run in order: the last job's holes recorded, held's account is done
	eventually(t, 60*time.Second, "the last job's older holes recorded missed", func() bool {
		return count(f.history(last), store.Missed, "waited on a node") >= seededHoles-8
	})
	if n := count(f.history(held), store.Missed, ""); n != 0 {
		t.Fatalf("%d slots of %s recorded missed while another node held its lease (taken after the shared read)", n, held)
	}
}

// seededHoles is how many holes seedHoles leaves each job: the newest 8 followed up, 4 recorded
// missed at once.
const seededHoles = 12

// seedHoles records for n hourly catch-up jobs an old slot and the newest one, and claims the
// seededHoles slots between as queued (markQueued's claims): a catch-up a stopped node dropped.
func seedHoles(t *testing.T, f *fleet, n int) []scheduler.Job {
	t.Helper()
	ctx := context.Background()
	hourly := scheduler.QuietSchedule(time.Hour)
	sp, _ := workJob("h", hourly, nil).Spec()
	newest := sp.Prev(time.Now())
	old := sp.Prev(newest.Start.Add(-time.Duration(seededHoles)*time.Hour - time.Nanosecond))
	w := &witness{}
	var js []scheduler.Job
	for i := range n {
		name := fmt.Sprintf("holes-%02d", i)
		for _, sl := range []string{old.Value, newest.Value} {
			if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: name, Slot: sl, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		var marks []string
		for sl := sp.Next(old.Start); sl.Start.Before(newest.Start); sl = sp.Next(sl.Start) {
			marks = append(marks, "queued "+name+" "+sl.Value)
		}
		if len(marks) != seededHoles {
			t.Fatalf("%d holes, want %d", len(marks), seededHoles)
		}
		if _, err := f.stores[0].(store.Keys).Claim(ctx, store.ClaimRequest{Scope: "once.scheduler.recorded", Keys: marks,
			Claimant: store.Claimant{RunID: "record test"}}); err != nil {
			t.Fatal(err)
		}
		j := workJob(name, hourly, w.work(time.Millisecond))
		j.CatchUp, j.CatchUpMax = 30*time.Minute, 1
		js = append(js, j)
	}
	return js
}

// leaseReads counts the Leases calls.
type leaseReads struct {
	keyedStore
	n     atomic.Int64
	after func() // called after each read, before it returns (nil: nothing)
}

func (l *leaseReads) Leases(ctx context.Context) ([]store.Lease, error) {
	l.n.Add(1)
	ls, err := l.keyedStore.Leases(ctx)
	if l.after != nil {
		l.after()
	}
	return ls, err
}
