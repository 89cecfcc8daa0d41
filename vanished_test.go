package once_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// A sequence (a backfill, a catch-up) that takes over a vanished holder's lease warns of its
// abandoned attempt on the line of the slot being started then, the first, with that slot's run
// id: it named the range's last slot, which had not begun (an operator read the takeover as
// that slot's). The abandoned attempt is prev_slot. A sequence that begins no slot warns on its
// own line.
func TestVanishedWarningNamesTheSlotStarted(t *testing.T) {
	slots := []string{"2026-11-01", "2026-11-02", "2026-11-03"}
	for _, c := range []struct {
		name  string
		slots []string
		run   func(ctx context.Context, o once.Options, slots []string, onResult func(once.Result)) error
		want  string // the warning's slot
	}{
		{"sequence", slots, func(ctx context.Context, o once.Options, slots []string, on func(once.Result)) error {
			_, err := once.Sequence(ctx, o, slots, once.SeqOptions{OnResult: on}, succeed)
			return err
		}, slots[0]},
		{"stream", slots, func(ctx context.Context, o once.Options, slots []string, on func(once.Result)) error {
			return once.SequenceStream(ctx, o, slices.Values(slots), slots[len(slots)-1], once.SeqOptions{OnResult: on}, succeed)
		}, slots[0]},
		{"empty stream", nil, func(ctx context.Context, o once.Options, _ []string, on func(once.Result)) error {
			return once.SequenceStream(ctx, o, slices.Values([]string(nil)), "2026-11-30", once.SeqOptions{OnResult: on}, succeed)
		}, "2026-11-30"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := context.Background()
			ghost := forgeVanished(t, s, "nightly", "2026-10-31")
			var logs bytes.Buffer
			o := once.Options{Store: s, Task: "nightly", TTL: time.Second,
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			runIDs := map[string]string{}
			err := c.run(ctx, o, c.slots, func(r once.Result) {
				if r.Attempt != nil {
					runIDs[r.Slot] = r.Attempt.RunID
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			var warn map[string]any
			for line := range strings.Lines(logs.String()) {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && strings.Contains(m["msg"].(string), "vanished") {
					if warn != nil {
						t.Fatalf("two warnings:\n%s", logs.String())
					}
					warn = m
				}
			}
			if warn == nil || warn["slot"] != c.want || warn["prev_slot"] != "2026-10-31" || warn["prev_run_id"] != ghost {
				t.Fatalf("warning %v; want slot %s, prev_slot 2026-10-31, prev_run_id %s:\n%s", warn, c.want, ghost, logs.String())
			}
			if id, ran := runIDs[c.want]; ran && warn["run_id"] != id {
				t.Errorf("warning's run_id %v, the run id of slot %s is %s", warn["run_id"], c.want, id)
			}
		})
	}
}

func succeed(context.Context, *once.Run) error { return nil }

// forgeVanished leaves an attempt of task's slot running under a lease that expires at once, as a
// holder that vanished does, and returns its run id.
func forgeVanished(t *testing.T, s store.Store, task, slot string) string {
	t.Helper()
	ctx := context.Background()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "ghost", RunID: "r-ghost", TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: "r-ghost", Number: 1, Holder: "ghost", Token: l.Token, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	return "r-ghost"
}
