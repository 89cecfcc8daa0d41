package once

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/once-run/once/store"
)

// TracerName is the instrumentation scope of the guard's spans.
const TracerName = "github.com/once-run/once"

// The attributes of the guard's spans (docs/telemetry.md).
const (
	AttrTask     = attribute.Key("once.task")
	AttrSlot     = attribute.Key("once.slot")
	AttrRunID    = attribute.Key("once.run_id")
	AttrHolder   = attribute.Key("once.holder")
	AttrDecision = attribute.Key("once.decision") // ran, skipped, busy, review, or error
	AttrAttempt  = attribute.Key("once.attempt")  // this attempt's number; for skipped and review, the last one's
	AttrToken    = attribute.Key("once.fencing_token")
	AttrState    = attribute.Key("once.state") // the attempt's outcome; for skipped and review, the last attempt's state
	AttrExitCode = attribute.Key("once.exit_code")
	AttrPrevious = attribute.Key("once.previous")
	AttrReason   = attribute.Key("once.reason")
)

// spans mirrors the ledger in traces (Options.TracerProvider): each slot the guard decides gets one
// span named after the task: an attempt, or a decision the history records (skipped, busy,
// review: what is logged at Debug only — a fleet's busy and skipped slots, a catch-up's quiet
// skips — gets none), or the error that ended the call before either. A span starts when the guard
// began on its slot (for the first, when the call began: the local lock, the store and the lease
// are in it) and is started only once the decision is known, so that a decision that gets no span
// costs nothing. One per guarded call, shared by the guards of its slots.
type spans struct {
	tr        trace.Tracer // nil: tracing off
	slot      string       // the slot at hand
	from      time.Time    // when the guard began on it
	done      bool         // it has had its span
	abandoned []store.Attempt
}

func newSpans(o Options, slot string) *spans {
	s := &spans{slot: slot, from: time.Now()}
	if o.TracerProvider != nil {
		s.tr = o.TracerProvider.Tracer(TracerName)
	}
	return s
}

// next moves on to slot, begun now.
func (s *spans) next(slot string) { s.slot, s.from, s.done = slot, time.Now(), false }

// start starts the span of the slot at hand, named after the task, as a child of ctx's span (a
// remote parent from TRACEPARENT, in the once command); it is the no-op span when tracing is off.
// The attempts that vanished holders left running (found as the lease was taken) are events of
// the call's first span.
func (g *guard) startSpan(ctx context.Context, d Decision, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	s := g.sp
	if s.tr == nil {
		return ctx, noop.Span{}
	}
	s.done = true
	base := []attribute.KeyValue{AttrTask.String(g.o.Task), AttrSlot.String(s.slot), AttrRunID.String(g.runID),
		AttrHolder.String(g.o.Holder), AttrDecision.String(string(d))}
	ctx, sp := s.tr.Start(ctx, g.o.Task, trace.WithTimestamp(s.from), trace.WithAttributes(append(base, attrs...)...))
	for _, a := range s.abandoned {
		sp.AddEvent("abandoned", trace.WithAttributes(attribute.String("once.prev_slot", a.Slot),
			attribute.String("once.prev_run_id", a.RunID), attribute.String("once.prev_holder", a.Holder),
			attribute.Int64("once.prev_fencing_token", a.Token)))
	}
	s.abandoned = nil
	return ctx, sp
}

// decisionSpan is the span of a slot that was not run: skipped, busy, review (an error status).
func (g *guard) decisionSpan(ctx context.Context, d Decision, reason string, attrs ...attribute.KeyValue) {
	_, sp := g.startSpan(ctx, d, append(attrs, AttrReason.String(reason))...)
	if d == Review {
		sp.SetStatus(codes.Error, "needs review: "+reason)
	}
	sp.End()
}

// lastAttrs describe the slot's last attempt, for a skipped or review span under token.
func lastAttrs(last *store.Attempt, token int64) []attribute.KeyValue {
	return []attribute.KeyValue{AttrToken.Int64(token), AttrAttempt.Int(last.Number), AttrState.String(string(last.State))}
}

// busyAttrs describe the lease's holder, for a busy span; none when only the local lock was busy.
func busyAttrs(holder *store.Lease) []attribute.KeyValue {
	if holder == nil {
		return nil
	}
	return []attribute.KeyValue{attribute.String("once.busy.holder", holder.Holder),
		attribute.String("once.busy.run_id", holder.RunID), attribute.Int64("once.busy.fencing_token", holder.Token)}
}

// errorSpan is the span of a slot whose call ended in err before the slot had a span of its own.
func (g *guard) errorSpan(ctx context.Context, err error) {
	if g.sp.done || err == nil {
		return
	}
	_, sp := g.startSpan(ctx, "error")
	sp.RecordError(err)
	sp.SetStatus(codes.Error, err.Error())
	sp.End()
}

// endAttempt ends an attempt's span with its outcome: an error status unless it succeeded.
func endAttempt(sp trace.Span, out store.Outcome, recordErr error) {
	if !sp.IsRecording() {
		sp.End()
		return
	}
	sp.SetAttributes(AttrState.String(string(out.State)), AttrExitCode.Int(*out.ExitCode))
	switch {
	case recordErr != nil:
		sp.RecordError(recordErr)
		sp.SetStatus(codes.Error, "outcome not recorded: "+recordErr.Error())
	case out.State != store.Succeeded:
		desc := out.Note
		if desc == "" {
			desc = "exit status " + strconv.Itoa(*out.ExitCode)
		}
		sp.SetStatus(codes.Error, string(out.State)+": "+desc)
	}
	sp.End()
}

// attemptAttrs describe the attempt run, for its span.
func attemptAttrs(run *Run) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrAttempt.Int(run.Attempt), AttrToken.Int64(run.Token)}
	if run.Previous != "" {
		attrs = append(attrs, AttrPrevious.String(string(run.Previous)))
	}
	return attrs
}

// failSpan ends an attempt's span that ended in err before its outcome.
func failSpan(sp trace.Span, err error) {
	sp.SetAttributes(AttrDecision.String("error"))
	sp.RecordError(err)
	sp.SetStatus(codes.Error, err.Error())
	sp.End()
}
