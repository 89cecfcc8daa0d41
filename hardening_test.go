package once_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// A holder is checked like a task name: too long, control characters or invalid UTF-8 is
// ErrInvalid (and store.ErrInvalid), before anything touches the store.
func TestHolderValidated(t *testing.T) {
	s, _ := newStore(t)
	for _, h := range []string{strings.Repeat("h", store.MaxHolderLen+1), "evil\x1b]0;pwned\x07", "two\nlines", "bad\xff"} {
		_, err := once.Do(context.Background(), once.Options{Store: s, Task: "t", Holder: h}, ok)
		if !errors.Is(err, once.ErrInvalid) || !errors.Is(err, store.ErrInvalid) || !strings.HasPrefix(err.Error(), "Options.Holder ") {
			t.Errorf("holder %q: %v, want ErrInvalid naming Options.Holder", h, err)
		}
	}
	if hist, _ := s.History(context.Background(), store.HistoryQuery{}); len(hist) != 0 {
		t.Fatalf("a refused holder left history: %+v", hist)
	}
	if r := do(t, once.Options{Store: s, Task: "t", Holder: strings.Repeat("€", store.MaxHolderLen/3)}, ok); r.Decision != once.Ran {
		t.Fatalf("a holder at the limit: %+v", r)
	}
}

// The task name's offending character is reported as itself, not as its first byte.
func TestValidateTaskNamesTheCharacter(t *testing.T) {
	for name, want := range map[string]string{
		"tâche":   `'â' at byte 1`,
		"日本":      `'日' at byte 0`,
		"a\x1bb":  `'\x1b' at byte 1`,
		"ok\xffx": "the byte 0xff (not UTF-8) at byte 2",
	} {
		err := once.ValidateTask(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTask(%q) = %v, want it to mention %s", name, err, want)
		}
	}
}

// A work error of any size and bytes is recorded, clipped to store.MaxNoteLen, as valid UTF-8.
func TestHugeWorkErrorIsClipped(t *testing.T) {
	s, _ := newStore(t)
	huge := errors.New(strings.Repeat("ü", 40000) + "\xff\x00")
	r := do(t, once.Options{Store: s, Task: "t", Slot: "s"}, func(context.Context, *once.Run) error { return huge })
	if r.RecordErr != nil || r.Attempt.State != store.Failed {
		t.Fatalf("%+v", r)
	}
	if n := len(r.Attempt.Note); n > store.MaxNoteLen || !strings.HasSuffix(r.Attempt.Note, "…") {
		t.Fatalf("note of %d bytes, want at most %d ending with …", n, store.MaxNoteLen)
	}
}

// ResolveHint supplies the needs-review log line's rerun_with; without it there is none.
func TestResolveHint(t *testing.T) {
	s, _ := newStore(t)
	var buf bytes.Buffer
	o := once.Options{Store: s, Task: "t", Slot: "s", MaxAttempts: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	do(t, o, func(context.Context, *once.Run) error { return errors.New("no") })
	if r := do(t, o, ok); r.Decision != once.Review || strings.Contains(buf.String(), "rerun_with") {
		t.Fatalf("%+v\n%s", r, buf.String())
	}
	o.ResolveHint = func(slot string) string { return "resolve " + slot }
	if r := do(t, o, ok); r.Decision != once.Review || !strings.Contains(buf.String(), `rerun_with="resolve s"`) {
		t.Fatalf("%+v\n%s", r, buf.String())
	}
}

// SequenceStream decides every slot the iterator yields, in order, under one lease, and keeps
// nothing: the iterator is pulled one slot at a time.
func TestSequenceStream(t *testing.T) {
	s, _ := newStore(t)
	const n = 50
	pulled := 0
	slots := iter.Seq[string](func(yield func(string) bool) {
		for i := range n {
			pulled++
			if !yield("s" + strconv.Itoa(i)) {
				return
			}
		}
	})
	var got []string
	var tokens = map[int64]bool{}
	err := once.SequenceStream(context.Background(), once.Options{Store: s, Task: "t", TTL: time.Minute}, slots, "s49",
		once.SeqOptions{OnResult: func(r once.Result) { got = append(got, r.Slot); tokens[r.Attempt.Token] = true }},
		func(_ context.Context, run *once.Run) error {
			if want := "s" + strconv.Itoa(pulled-1); run.Slot != want {
				t.Errorf("running %s while the iterator is at %s", run.Slot, want)
			}
			return nil
		})
	if err != nil || len(got) != n || got[0] != "s0" || got[n-1] != "s49" || len(tokens) != 1 {
		t.Fatalf("err %v, %d results (%v), %d tokens", err, len(got), got, len(tokens))
	}
	// It stops at the first failure, as Sequence does, and pulls no further.
	pulled, got = 0, nil
	err = once.SequenceStream(context.Background(), once.Options{Store: s, Task: "u", TTL: time.Minute}, slots, "s49",
		once.SeqOptions{OnResult: func(r once.Result) { got = append(got, r.Slot) }},
		func(_ context.Context, run *once.Run) error {
			if run.Slot == "s3" {
				return errors.New("fail")
			}
			return nil
		})
	if err != nil || len(got) != 4 || pulled != 4 {
		t.Fatalf("err %v, results %v, pulled %d: want it to stop at s3", err, got, pulled)
	}
}

// beginRefused is a store whose Begin finds the lease gone, as when it is lost between the grant
// and the start of the command.
type beginRefused struct{ store.Store }

func (beginRefused) Begin(context.Context, store.Attempt) (store.Attempt, error) {
	return store.Attempt{}, fmt.Errorf("%w: token 1 is not the latest", store.ErrNotHeld)
}

// A run that loses its lease after taking it and before its command starts is busy (75 from the
// CLI, which prints nothing for busy) and says so at warn, with the store's answer: a --wait that
// got the lease and then exited busy would otherwise leave an operator nothing to read.
func TestLostBeforeStartSaysSoAtWarn(t *testing.T) {
	s, _ := newStore(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ran := false
	res := do(t, once.Options{Store: beginRefused{s}, Task: "t", Slot: "s", TTL: time.Minute, LockDir: t.TempDir(), Logger: log},
		func(context.Context, *once.Run) error { ran = true; return nil })
	if res.Decision != once.Busy || ran {
		t.Fatalf("decision %s (ran %v), want busy without running", res.Decision, ran)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "lost the lease before starting") ||
		!strings.Contains(out, "not the latest") {
		t.Fatalf("log at warn: %q, want the busy reason and the store's answer", out)
	}
}

// finishRefused is a store that cannot record an outcome (a full disk, an outage after the work).
type finishRefused struct{ store.Store }

func (finishRefused) Finish(context.Context, string, int64, store.Outcome) (store.Attempt, error) {
	return store.Attempt{}, fmt.Errorf("%w: disk full", store.ErrUnavailable)
}

// An outcome the store will not take is retried while the lease lasts, said at warn on the first
// failure (it was silent until the end), and a stop signal (ctx's end) makes the try under way the
// last: with a long TTL the call hung for most of it, deaf to signals.
func TestUnrecordedOutcomeSaysSoAndStops(t *testing.T) {
	s, _ := newStore(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for !strings.Contains(logs.String(), "could not be recorded") {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	t0 := time.Now()
	res, err := once.Do(ctx, once.Options{Store: finishRefused{s}, Task: "t", Slot: "s", TTL: time.Hour, LockDir: t.TempDir(), Logger: log},
		func(context.Context, *once.Run) error { return nil })
	if err != nil || res.Decision != once.Ran || !errors.Is(res.RecordErr, store.ErrUnavailable) {
		t.Fatalf("result %+v, err %v: want ran, its outcome not recorded", res, err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Fatalf("gave up after %s of a 1h lease, want at the stop", took)
	}
	if out := logs.String(); !strings.Contains(out, "disk full") || !strings.Contains(out, "NOT recorded") {
		t.Fatalf("log: %q", out)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
