package telemetry

import (
	"math"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// resourceSpans groups spans by resource, then instrumentation scope, as OTLP does: the
// resource_spans of an ExportTraceServiceRequest.
func resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type scopeKey struct {
		r attribute.Distinct
		s instrumentation.Scope
	}
	byRes := map[attribute.Distinct]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	var out []*tracepb.ResourceSpans
	for _, s := range spans {
		rk := s.Resource().Equivalent()
		rs, ok := byRes[rk]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: resourceOf(s.Resource()), SchemaUrl: s.Resource().SchemaURL()}
			byRes[rk] = rs
			out = append(out, rs)
		}
		sk := scopeKey{rk, s.InstrumentationScope()}
		ss, ok := byScope[sk]
		if !ok {
			sc := s.InstrumentationScope()
			ss = &tracepb.ScopeSpans{SchemaUrl: sc.SchemaURL, Scope: &commonpb.InstrumentationScope{
				Name: sc.Name, Version: sc.Version, Attributes: keyValues(sc.Attributes.ToSlice())}}
			byScope[sk] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanOf(s))
	}
	return out
}

func resourceOf(r *resource.Resource) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: keyValues(r.Attributes())}
}

// spanOf is the OTLP form of a finished span.
func spanOf(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId: tid[:], SpanId: sid[:], TraceState: sc.TraceState().String(),
		Flags: flags(sc.TraceFlags(), s.Parent()),
		Name:  s.Name(), Kind: tracepb.Span_SpanKind(s.SpanKind()), // the same numbers, internal = 1
		StartTimeUnixNano: unixNano(s.StartTime().UnixNano()), EndTimeUnixNano: unixNano(s.EndTime().UnixNano()),
		Attributes: keyValues(s.Attributes()), DroppedAttributesCount: u32(s.DroppedAttributes()),
		DroppedEventsCount: u32(s.DroppedEvents()), DroppedLinksCount: u32(s.DroppedLinks()),
		Status: status(s.Status()),
	}
	if s.SpanKind() > trace.SpanKindConsumer {
		p.Kind = tracepb.Span_SPAN_KIND_UNSPECIFIED
	}
	if psid := s.Parent().SpanID(); psid.IsValid() {
		p.ParentSpanId = psid[:]
	}
	for _, e := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{Name: e.Name, TimeUnixNano: unixNano(e.Time.UnixNano()),
			Attributes: keyValues(e.Attributes), DroppedAttributesCount: u32(e.DroppedAttributeCount)})
	}
	for _, l := range s.Links() {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: tid[:], SpanId: sid[:],
			TraceState: l.SpanContext.TraceState().String(), Flags: flags(l.SpanContext.TraceFlags(), l.SpanContext),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: u32(l.DroppedAttributeCount)})
	}
	return p
}

// flags are the W3C trace flags, and whether the parent (or linked span) is remote.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

// status maps the API's codes (Unset 0, Error 1, Ok 2) to OTLP's (Unset 0, Ok 1, Error 2).
func status(st sdktrace.Status) *tracepb.Status {
	switch st.Code {
	case codes.Error:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return &tracepb.Status{}
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)}
	}
	return out
}

// anyValue is an attribute's value in OTLP; a type this exporter does not know is sent as its text.
func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BYTESLICE:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}}
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), attribute.StringValue)
	case attribute.EMPTY:
		return &commonpb.AnyValue{}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
}

func array[T any](vs []T, value func(T) attribute.Value) *commonpb.AnyValue {
	a := &commonpb.ArrayValue{Values: make([]*commonpb.AnyValue, len(vs))}
	for i, v := range vs {
		a.Values[i] = anyValue(value(v))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: a}}
}

func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

func u32(n int) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }
