// Package telemetry sends the guard's spans (package once, Options.TracerProvider) to an
// OpenTelemetry collector over OTLP/HTTP when the standard OTEL_* environment asks for it, and does
// nothing at all when it does not: no SDK object, no goroutine, no connection. The once command
// calls Start once per process and Shutdown before it exits; docs/telemetry.md.
package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultFlush bounds how long Shutdown waits for the last spans to reach the collector, unless
// OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds) says otherwise: a collector that
// is down or slow delays the exit of once run by at most this, and never changes its exit status.
const DefaultFlush = time.Second

// Tracing is the SDK's tracer provider with its OTLP/HTTP exporter. A nil *Tracing is tracing off:
// its methods are no-ops and Provider is nil.
type Tracing struct {
	tp    *sdktrace.TracerProvider
	exp   *exporter
	flush time.Duration
	log   *slog.Logger
	// closing is set by Shutdown: export errors are kept in failed, the first one, for it to report.
	closing atomic.Bool
	failed  atomic.Pointer[error]
}

// Start sets up tracing from the environment read by getenv (os.Getenv), or returns nil — tracing
// off, nothing set up — when OTEL_SDK_DISABLED is true, OTEL_TRACES_EXPORTER is none (or names an
// exporter other than otlp), the protocol is not http/protobuf, or no endpoint is set
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_TRACES_EXPORTER=otlp
// alone means the default, http://localhost:4318). What it cannot honour is logged at Warn, once:
// telemetry never stops a job. version is service.version.
func Start(getenv func(string) string, version string, log *slog.Logger) *Tracing {
	if !wanted(getenv, log) {
		return nil
	}
	exp, err := newExporter(getenv, version)
	if err != nil {
		log.Warn("OpenTelemetry: tracing is off", "err", err)
		return nil
	}
	res, err := resource.New(context.Background(), resource.WithAttributes(attribute.String("service.name", "once"),
		attribute.String("service.version", version)), resource.WithHost(), resource.WithTelemetrySDK(),
		resource.WithFromEnv()) // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; later options win
	if err != nil { // a malformed OTEL_RESOURCE_ATTRIBUTES: res holds what could be read
		log.Warn("OpenTelemetry: part of the resource could not be read", "err", err)
	}
	t := &Tracing{exp: exp, flush: DefaultFlush, log: log}
	if firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") != "" {
		t.flush = exp.timeout
	}
	// Export errors reach the log, not the SDK's default handler (the standard logger on stderr);
	// once Shutdown has begun, it reports them, in one line.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if t.closing.Load() {
			t.failed.CompareAndSwap(nil, &err)
			return
		}
		log.Warn("OpenTelemetry: could not export spans", "err", err)
	}))
	// The sampler, its argument and span limits: the SDK reads OTEL_TRACES_SAMPLER* and
	// OTEL_SPAN_* itself; the batcher OTEL_BSP_*.
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return t
}

// wanted says whether the environment asks for traces sent over OTLP/HTTP, warning about what it
// asks for that once cannot do.
func wanted(getenv func(string) string, log *slog.Logger) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp":
	case "none":
		return false
	default:
		log.Warn("OpenTelemetry: tracing is off: once sends traces only over OTLP (OTEL_TRACES_EXPORTER=otlp)", "OTEL_TRACES_EXPORTER", exporter)
		return false
	}
	if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && exporter == "" {
		return false
	}
	proto := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch proto {
	case "", "http/protobuf":
		return true
	}
	log.Warn("OpenTelemetry: tracing is off: once speaks OTLP/HTTP with protobuf only; point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318) and set the protocol to http/protobuf",
		"protocol", proto)
	return false
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// Provider is the tracer provider for once.Options.TracerProvider; nil when tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// Shutdown exports the spans not yet sent and stops the exporter, waiting at most the flush
// timeout (DefaultFlush unless the environment's OTLP timeout says otherwise); spans it could not
// send are dropped with a warning.
func (t *Tracing) Shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.flush)
	defer cancel()
	t.closing.Store(true)
	err := t.tp.Shutdown(ctx)
	if p := t.failed.Load(); err == nil && p != nil {
		err = *p
	}
	switch {
	case err == nil:
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		// The batcher may still be sending: the process exits without waiting for it.
		t.log.Warn("OpenTelemetry: gave up exporting spans", "after", t.flush.String(), "err", err)
	default:
		t.log.Warn("OpenTelemetry: could not export spans", "err", err)
	}
}

// envCarrier reads W3C trace context from environment variables, the carrier of the OpenTelemetry
// specification ("Environment Variables as Context Propagation Carriers"): TRACEPARENT, TRACESTATE.
type envCarrier func(string) string

func (e envCarrier) Get(key string) string { return e(strings.ToUpper(key)) }
func (e envCarrier) Set(string, string)    {}
func (e envCarrier) Keys() []string        { return []string{"TRACEPARENT", "TRACESTATE"} }

// Parent is ctx with the remote span context of a valid TRACEPARENT (and TRACESTATE) in the
// environment read by getenv, so that a run started by a traced scheduler joins its trace; ctx as
// it is when there is none or it is malformed.
func Parent(ctx context.Context, getenv func(string) string) context.Context {
	if getenv("TRACEPARENT") == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, envCarrier(getenv))
}
