package telemetry

import (
	"math"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The reference the hand-written messages of transform.go are checked against: the same spans
// through the generated OTLP types (one resource, one scope).
func refResourceSpans(spans []sdktrace.ReadOnlySpan) *tracepb.ResourceSpans {
	sc := spans[0].InstrumentationScope()
	ss := &tracepb.ScopeSpans{SchemaUrl: sc.SchemaURL, Scope: &commonpb.InstrumentationScope{
		Name: sc.Name, Version: sc.Version, Attributes: refKeyValues(sc.Attributes.ToSlice())}}
	for _, s := range spans {
		ss.Spans = append(ss.Spans, refSpan(s))
	}
	return &tracepb.ResourceSpans{Resource: refResource(spans[0].Resource()), ScopeSpans: []*tracepb.ScopeSpans{ss},
		SchemaUrl: spans[0].Resource().SchemaURL()}
}

func refResource(r *resource.Resource) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: refKeyValues(r.Attributes())}
}

// spanOf is the OTLP form of a finished span.
func refSpan(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId: tid[:], SpanId: sid[:], TraceState: sc.TraceState().String(),
		Flags: refFlags(sc.TraceFlags(), s.Parent()),
		Name:  s.Name(), Kind: tracepb.Span_SpanKind(s.SpanKind()), // the same numbers, internal = 1
		StartTimeUnixNano: refUnixNano(s.StartTime().UnixNano()), EndTimeUnixNano: refUnixNano(s.EndTime().UnixNano()),
		Attributes: refKeyValues(s.Attributes()), DroppedAttributesCount: refU32(s.DroppedAttributes()),
		DroppedEventsCount: refU32(s.DroppedEvents()), DroppedLinksCount: refU32(s.DroppedLinks()),
		Status: refStatus(s.Status()),
	}
	if s.SpanKind() > trace.SpanKindConsumer {
		p.Kind = tracepb.Span_SPAN_KIND_UNSPECIFIED
	}
	if psid := s.Parent().SpanID(); psid.IsValid() {
		p.ParentSpanId = psid[:]
	}
	for _, e := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{Name: e.Name, TimeUnixNano: refUnixNano(e.Time.UnixNano()),
			Attributes: refKeyValues(e.Attributes), DroppedAttributesCount: refU32(e.DroppedAttributeCount)})
	}
	for _, l := range s.Links() {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: tid[:], SpanId: sid[:],
			TraceState: l.SpanContext.TraceState().String(), Flags: refFlags(l.SpanContext.TraceFlags(), l.SpanContext),
			Attributes: refKeyValues(l.Attributes), DroppedAttributesCount: refU32(l.DroppedAttributeCount)})
	}
	return p
}

// flags are the W3C trace flags, and whether the parent (or linked span) is remote.
func refFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

// status maps the API's codes (Unset 0, Error 1, Ok 2) to OTLP's (Unset 0, Ok 1, Error 2).
func refStatus(st sdktrace.Status) *tracepb.Status {
	switch st.Code {
	case codes.Error:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return &tracepb.Status{}
}

func refKeyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: refAnyValue(kv.Value)}
	}
	return out
}

// anyValue is an attribute's value in OTLP; a type this exporter does not know is sent as its text.
func refAnyValue(v attribute.Value) *commonpb.AnyValue {
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
		return refArray(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return refArray(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return refArray(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return refArray(v.AsStringSlice(), attribute.StringValue)
	case attribute.EMPTY:
		return &commonpb.AnyValue{}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
}

func refArray[T any](vs []T, value func(T) attribute.Value) *commonpb.AnyValue {
	a := &commonpb.ArrayValue{Values: make([]*commonpb.AnyValue, len(vs))}
	for i, v := range vs {
		a.Values[i] = refAnyValue(value(v))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: a}}
}

func refUnixNano(n int64) uint64 { return uint64(max(n, 0)) }

func refU32(n int) uint32 { return uint32(min(max(int64(n), 0), math.MaxUint32)) }
