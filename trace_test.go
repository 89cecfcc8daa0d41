package once_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// The guard's spans mirror the ledger: an attempt (the work's context carries it), a skip, a
// review, a busy lease, an attempt whose work could not start; a fleet's busy makes none.
func TestSpans(t *testing.T) {
	s, _ := newStore(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	o := once.Options{Store: s, Task: "t", Slot: "a", TTL: 10 * time.Second, MaxAttempts: 1, TracerProvider: tp}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)

	var workSpan trace.SpanContext
	if _, err := once.Do(ctx, o, func(ctx context.Context, _ *once.Run) error {
		workSpan = trace.SpanContextFromContext(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	do(t, o, ok) // skipped
	o.Slot = "b"
	do(t, o, func(context.Context, *once.Run) error { return errors.New("boom") })
	do(t, o, ok) // review: one attempt allowed
	g, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "t", Holder: "other", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	do(t, o, ok) // busy
	o.Fleet = true
	do(t, o, ok) // busy in a fleet: no span
	if err := s.Release(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	o.Fleet, o.Slot = false, "c"
	o.Prepare = func(context.Context, *once.Run) error { return errors.New("no such command") }
	if _, err := once.Do(context.Background(), o, ok); !errors.Is(err, once.ErrNotStarted) {
		t.Fatal(err)
	}

	spans := rec.Ended()
	want := []struct {
		decision, state string
		code            codes.Code
	}{{"ran", "succeeded", codes.Unset}, {"skipped", "succeeded", codes.Unset}, {"ran", "failed", codes.Error},
		{"review", "failed", codes.Error}, {"busy", "", codes.Unset}, {"error", "", codes.Error}}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		sp := spans[i]
		if sp.Name() != "t" || attrOf(sp, once.AttrDecision).AsString() != w.decision || attrOf(sp, once.AttrState).AsString() != w.state ||
			sp.Status().Code != w.code || attrOf(sp, once.AttrRunID).AsString() == "" {
			t.Errorf("span %d: %s %v %v, want %+v", i, sp.Name(), sp.Attributes(), sp.Status(), w)
		}
	}
	first := spans[0]
	if !first.SpanContext().Equal(workSpan) || !first.Parent().Equal(parent) || attrOf(first, once.AttrToken).AsInt64() == 0 ||
		attrOf(first, once.AttrAttempt).AsInt64() != 1 || attrOf(first, once.AttrExitCode).AsInt64() != 0 {
		t.Errorf("attempt span %v (parent %v), the work's %v", first.SpanContext(), first.Parent(), workSpan)
	}
	if h := attrOf(spans[4], "once.busy.holder").AsString(); h != "other" {
		t.Errorf("busy span: holder %q", h)
	}
}
