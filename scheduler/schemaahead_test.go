package scheduler_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// A node whose store a newer once upgraded while it ran (an older daemon left running across an
// upgrade) stops at its next poll: Run returns the store's ErrSchemaAhead, an ErrUnavailable
// (once daemon exits 69), instead of going on writing into a schema it does not know.
func TestRunStopsWhenSchemaMovesAhead(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	s, err := scheduler.New(scheduler.Config{Store: f.stores[0], Node: "old", Poll: 50 * time.Millisecond,
		Jobs: []scheduler.Job{workJob("daily", scheduler.QuietSchedule(24*time.Hour), (&witness{}).work(time.Millisecond))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	db, err := sql.Open("sqlite", strings.TrimPrefix(f.dsn, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(200 * time.Millisecond) // a few polls on the current schema
	select {
	case err := <-done:
		t.Fatalf("Run returned before the upgrade: %v", err)
	default:
	}
	if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", sqlite.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrSchemaAhead) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Run: %v; want ErrSchemaAhead", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still running 20 s after a newer once upgraded the store")
	}
}
