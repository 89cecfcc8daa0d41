package cli

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/trace"

	"github.com/once-run/once/internal/telemetry"
)

// tracerProvider starts tracing from the OTEL_* environment the first time a command that runs
// jobs asks (run, backfill, daemon), and returns its provider for the guard: nil, with nothing
// set up, when the environment does not ask for traces (docs/telemetry.md). Run shuts it down,
// bounded, before the process exits.
func (a *app) tracerProvider() trace.TracerProvider {
	if !a.traceStarted {
		a.traceStarted = true
		log, err := a.logger()
		if err != nil { // validated before any command gets here
			return nil
		}
		a.tracing = telemetry.Start(os.Getenv, version(), log)
	}
	return a.tracing.Provider()
}

// traceParent is ctx joined to the trace of an incoming TRACEPARENT when tracing is on: a run
// started by a traced scheduler is a child of its span.
func (a *app) traceParent(ctx context.Context) context.Context {
	if a.tracerProvider() == nil {
		return ctx
	}
	return telemetry.Parent(ctx, os.Getenv)
}
