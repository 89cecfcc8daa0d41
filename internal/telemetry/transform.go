package telemetry

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The OTLP trace messages are written here with protowire, field by field, from
// opentelemetry-proto's trace.proto, common.proto and resource.proto (the field numbers below),
// rather than through the generated go.opentelemetry.io/proto/otlp types: their descriptors are
// built at package init, at every start of once and of its shim (about 20 KiB in 67 allocations),
// for three messages a run. The tests decode what is written here with the generated types.

// msg is a protobuf message being written.
type msg []byte

func (m msg) str(n protowire.Number, s string) msg {
	if s == "" {
		return m
	}
	return protowire.AppendString(protowire.AppendTag(m, n, protowire.BytesType), s)
}

func (m msg) raw(n protowire.Number, b []byte) msg {
	return protowire.AppendBytes(protowire.AppendTag(m, n, protowire.BytesType), b)
}

func (m msg) uvarint(n protowire.Number, v uint64) msg {
	if v == 0 {
		return m
	}
	return protowire.AppendVarint(protowire.AppendTag(m, n, protowire.VarintType), v)
}

func (m msg) fixed64(n protowire.Number, v uint64) msg {
	if v == 0 {
		return m
	}
	return protowire.AppendFixed64(protowire.AppendTag(m, n, protowire.Fixed64Type), v)
}

func (m msg) fixed32(n protowire.Number, v uint32) msg {
	return protowire.AppendFixed32(protowire.AppendTag(m, n, protowire.Fixed32Type), v)
}

func (m msg) attrs(n protowire.Number, kvs []attribute.KeyValue) msg {
	for _, kv := range kvs {
		m = m.raw(n, keyValue(kv))
	}
	return m
}

// exportRequest is an ExportTraceServiceRequest of spans: resource_spans (1), grouped by
// resource, then by instrumentation scope, as OTLP does.
func exportRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		r attribute.Distinct
		s instrumentation.Scope
	}
	type group struct {
		res    *resource.Resource
		scopes []scopeKey
	}
	var order []attribute.Distinct
	groups := map[attribute.Distinct]*group{}
	bySpan := map[scopeKey][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		rk := s.Resource().Equivalent()
		g, ok := groups[rk]
		if !ok {
			g = &group{res: s.Resource()}
			groups[rk] = g
			order = append(order, rk)
		}
		sk := scopeKey{rk, s.InstrumentationScope()}
		if _, ok := bySpan[sk]; !ok {
			g.scopes = append(g.scopes, sk)
		}
		bySpan[sk] = append(bySpan[sk], s)
	}
	var req msg
	for _, rk := range order {
		g := groups[rk]
		rs := msg(nil).raw(1, msg(nil).attrs(1, g.res.Attributes())) // ResourceSpans.resource: Resource.attributes
		for _, sk := range g.scopes {
			sc := sk.s
			scope := msg(nil).str(1, sc.Name).str(2, sc.Version).attrs(3, sc.Attributes.ToSlice())
			ss := msg(nil).raw(1, scope) // ScopeSpans.scope
			for _, s := range bySpan[sk] {
				ss = ss.raw(2, spanOf(s)) // ScopeSpans.spans
			}
			rs = rs.raw(2, ss.str(3, sc.SchemaURL)) // ResourceSpans.scope_spans
		}
		req = req.raw(1, rs.str(3, g.res.SchemaURL()))
	}
	return req
}

// spanOf is a finished span as an OTLP Span.
func spanOf(s sdktrace.ReadOnlySpan) msg {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	m := msg(nil).raw(1, tid[:]).raw(2, sid[:]).str(3, sc.TraceState().String())
	if psid := s.Parent().SpanID(); psid.IsValid() {
		m = m.raw(4, psid[:])
	}
	kind := s.SpanKind() // the same numbers as OTLP's SpanKind: internal 1 … consumer 5
	if kind > trace.SpanKindConsumer {
		kind = trace.SpanKindUnspecified
	}
	m = m.str(5, s.Name()).uvarint(6, uint64(kind)).
		fixed64(7, unixNano(s.StartTime().UnixNano())).fixed64(8, unixNano(s.EndTime().UnixNano())).
		attrs(9, s.Attributes()).uvarint(10, u32(s.DroppedAttributes()))
	for _, e := range s.Events() {
		ev := msg(nil).fixed64(1, unixNano(e.Time.UnixNano())).str(2, e.Name).attrs(3, e.Attributes).
			uvarint(4, u32(e.DroppedAttributeCount))
		m = m.raw(11, ev)
	}
	m = m.uvarint(12, u32(s.DroppedEvents()))
	for _, l := range s.Links() {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		lm := msg(nil).raw(1, tid[:]).raw(2, sid[:]).str(3, l.SpanContext.TraceState().String()).
			attrs(4, l.Attributes).uvarint(5, u32(l.DroppedAttributeCount)).fixed32(6, flags(l.SpanContext.TraceFlags(), l.SpanContext))
		m = m.raw(13, lm)
	}
	m = m.uvarint(14, u32(s.DroppedLinks())).raw(15, status(s.Status()))
	return m.fixed32(16, flags(sc.TraceFlags(), s.Parent()))
}

// OTLP's SpanFlags: the context has is_remote (0x100), and it is remote (0x200).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// flags are the W3C trace flags, and whether the parent (or linked span) is remote.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// OTLP's Status codes: unset 0, ok 1, error 2 (the API's are unset 0, error 1, ok 2).
const (
	statusOK    = 1
	statusError = 2
)

// status is an OTLP Status: message (2), code (3).
func status(st sdktrace.Status) msg {
	switch st.Code {
	case codes.Error:
		return msg(nil).str(2, st.Description).uvarint(3, statusError)
	case codes.Ok:
		return msg(nil).uvarint(3, statusOK)
	}
	return msg(nil)
}

// keyValue is an OTLP KeyValue: key (1), value (2).
func keyValue(kv attribute.KeyValue) msg {
	return msg(nil).str(1, string(kv.Key)).raw(2, anyValue(kv.Value))
}

// anyValue is an attribute's value as an OTLP AnyValue, whose oneof field is written even when
// zero (false, 0, ""); a type this exporter does not know is sent as its text.
func anyValue(v attribute.Value) msg {
	var m msg
	switch v.Type() {
	case attribute.STRING:
		return m.raw(1, []byte(v.AsString()))
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(m, 2, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(m, 3, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(m, 4, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		return m.raw(7, v.AsByteSlice())
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), attribute.StringValue)
	case attribute.EMPTY:
		return m
	}
	return m.raw(1, []byte(v.String()))
}

// array is an AnyValue's array_value (5): an ArrayValue's values (1).
func array[T any](vs []T, value func(T) attribute.Value) msg {
	var a msg
	for _, v := range vs {
		a = a.raw(1, anyValue(value(v)))
	}
	return msg(nil).raw(5, a)
}

func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

func u32(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) }
