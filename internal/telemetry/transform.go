package telemetry

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The OTLP trace messages are written here field by field, from opentelemetry-proto's
// trace.proto, common.proto and resource.proto (the field numbers below), rather than through the
// generated go.opentelemetry.io/proto/otlp types: their descriptors are built at package init, at
// every start of once and of its shim (about 20 KiB in 67 allocations), for three messages a run.
// Nor through protowire: its package's init (google.golang.org/protobuf/internal/detrand) opened
// and read the once binary at every start. The wire format needs varints, fixed-width little-endian
// numbers and length-prefixed bytes (the encoding guide: protobuf.dev/programming-guides/encoding);
// the tests decode what is written here with the generated types.

// msg is a protobuf message being written.
type msg []byte

// field is a protobuf field number.
type field uint32

// Wire types (the encoding guide's table).
const (
	varintType  = 0
	fixed64Type = 1
	bytesType   = 2
	fixed32Type = 5
)

func (m msg) tag(n field, wt uint64) msg { return binary.AppendUvarint(m, uint64(n)<<3|wt) }

func (m msg) str(n field, s string) msg {
	if s == "" {
		return m
	}
	return append(binary.AppendUvarint(m.tag(n, bytesType), uint64(len(s))), s...)
}

func (m msg) raw(n field, b []byte) msg {
	return append(binary.AppendUvarint(m.tag(n, bytesType), uint64(len(b))), b...)
}

func (m msg) uvarint(n field, v uint64) msg {
	if v == 0 {
		return m
	}
	return binary.AppendUvarint(m.tag(n, varintType), v)
}

func (m msg) fixed64(n field, v uint64) msg {
	if v == 0 {
		return m
	}
	return binary.LittleEndian.AppendUint64(m.tag(n, fixed64Type), v)
}

func (m msg) fixed32(n field, v uint32) msg {
	return binary.LittleEndian.AppendUint32(m.tag(n, fixed32Type), v)
}

func (m msg) attrs(n field, kvs []attribute.KeyValue) msg {
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
		b := uint64(0)
		if v.AsBool() {
			b = 1
		}
		return binary.AppendUvarint(m.tag(2, varintType), b)
	case attribute.INT64:
		return binary.AppendUvarint(m.tag(3, varintType), uint64(v.AsInt64())) // int64: two's complement, ten bytes when negative
	case attribute.FLOAT64:
		return binary.LittleEndian.AppendUint64(m.tag(4, fixed64Type), math.Float64bits(v.AsFloat64()))
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

func u32(n int) uint64 { return uint64(min(max(int64(n), 0), math.MaxUint32)) }
