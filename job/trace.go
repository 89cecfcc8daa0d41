package job

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceEnv is env with the W3C trace context of ctx's span — the attempt's, when the guard traces
// (once.Options.TracerProvider) — as TRACEPARENT and TRACESTATE, the carrier the OpenTelemetry
// specification gives environment variables, in place of any this process inherited: a traced
// command's spans are children of its attempt's. Without a valid span context env is as it is,
// an inherited TRACEPARENT included.
func traceEnv(ctx context.Context, env []string) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return env
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "TRACEPARENT" || k == "TRACESTATE"
	})
	for _, k := range c.Keys() {
		env = append(env, strings.ToUpper(k)+"="+c.Get(k))
	}
	return env
}
