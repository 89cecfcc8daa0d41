package zk

import (
	"net/url"
	"testing"
	"time"

	"github.com/once-run/once/internal/costs"
	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// TestArchiveMarksRoundTrips: an archive's marks fall in buckets its slot's document made already
// (the same instants): its write finds those that exist in one read, not one failed multi per bucket.
// An archive is written on a run's path (every 32 runs of a slot), and its attempts are usually
// each in a second of their own (a job due every minute).
func TestArchiveMarksRoundTrips(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	u, err := url.Parse(withPrefix(t) + "&session_timeout=1h") // no pings in the count
	if err != nil {
		t.Fatal(err)
	}
	relay, err := costs.NewRelay(ctx, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	u.Host = relay.Addr()
	s, err := Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	k := kv{s}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var attempts []store.Attempt
	for i := range 32 {
		at := base.Add(time.Duration(i) * time.Minute)
		attempts = append(attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: i + 1, State: store.Succeeded, StartedAt: at, EndedAt: &at})
	}
	if _, err := k.Save(ctx, &kvstore.Doc{Task: "t", Slot: "s", Attempts: attempts}, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	before := relay.Trips()
	arc := &kvstore.Doc{Task: "t", Slot: kvstore.ArchiveSlot("s", 1), Attempts: attempts}
	if _, err := k.Save(ctx, arc, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	trips := relay.Trips() - before
	t.Logf("an archive of 32 attempts in 32 seconds whose buckets exist: %d round trips", trips)
	if trips > 3 {
		t.Errorf("the archive's write cost %d round trips: one per bucket that exists", trips)
	}
	// Every mark of both documents is in the index.
	for _, d := range []*kvstore.Doc{{Task: "t", Slot: "s", Attempts: attempts}, arc} {
		for _, m := range d.Marks() {
			ok, _, err := s.c.Exists(s.markPath("t", m))
			if err != nil || !ok {
				t.Fatalf("mark %s of %q: %v %v", m, d.Slot, ok, err)
			}
		}
	}
}
