package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestCheckpointUpgradeFromV6: a version 6 schema is upgraded on open (migration 007: the generated
// column has_checkpoint and attempts_checkpoint over the attempts already there), and a slot whose
// checkpoint an earlier attempt reported reads it after newer attempts without one, as Slot, Slots
// and prune see it. A migration cut short after its first ALTER TABLE (the column added, not the
// index) runs again.
func TestCheckpointUpgradeFromV6(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "x", RunID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	for i, cp := range []string{"cp1", "", ""} { // attempt 1 reports a checkpoint, 2 and 3 none
		run := []string{"r1", "r2", "r3"}[i]
		if _, err := s.Begin(ctx, store.Attempt{Task: "old", RunID: run, Holder: "x", Token: l.Token}); err != nil {
			t.Fatal(err)
		}
		if err := s.Report(ctx, run, l.Token, store.Report{Checkpoint: cp}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct{ name, undo string }{
		{"a version 6 schema", "ALTER TABLE {p}attempts DROP KEY attempts_checkpoint, DROP COLUMN has_checkpoint"},
		{"migration 007 cut short after its column", "ALTER TABLE {p}attempts DROP KEY attempts_checkpoint"},
	} {
		for _, q := range []string{step.undo, "DELETE FROM {p}schema_version WHERE version > 6"} {
			if _, err := s.DB.ExecContext(ctx, s.Q(q)); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s.Close()
		if s, err = Open(ctx, dsn); err != nil {
			t.Fatalf("open %s: %v", step.name, err)
		}
		checkpointRead(t, ctx, s, step.name)
	}
	s.Close()
}

// checkpointRead checks that TestCheckpointUpgradeFromV6's slot reads its checkpoint, cp1, by the
// index migration 007 adds.
func checkpointRead(t *testing.T, ctx context.Context, s *Store, after string) {
	t.Helper()
	st, err := s.Slot(ctx, "old", "")
	if err != nil || st.Checkpoint != "cp1" || st.Last == nil || st.Last.Number != 3 {
		t.Fatalf("after %s: Slot %+v, %v; want checkpoint cp1 of attempt 1, last attempt 3", after, st, err)
	}
	sts, err := s.Slots(ctx, "old", []string{""})
	if err != nil || len(sts) != 1 || sts[0].Checkpoint != "cp1" {
		t.Fatalf("after %s: Slots %+v, %v; want checkpoint cp1", after, sts, err)
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'attempts_checkpoint'`, s.Prefix+"attempts").Scan(&n); err != nil || n != 4 {
		t.Fatalf("after %s: attempts_checkpoint has %d columns, %v; want 4", after, n, err)
	}
}
