package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// syncBuffer is a log that the SDK's batcher may still write to after Shutdown gave up.
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

func (s *syncBuffer) Len() int { return len(s.String()) }

func logTo(b *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// Off unless an endpoint (or OTEL_TRACES_EXPORTER=otlp) asks, and then nothing is set up: no
// provider, no goroutine.
func TestStartOff(t *testing.T) {
	ep := "OTEL_EXPORTER_OTLP_ENDPOINT"
	for _, tc := range []struct {
		env  []string
		warn string
	}{
		{nil, ""},
		{[]string{"OTEL_SERVICE_NAME", "x", "OTEL_EXPORTER_OTLP_HEADERS", "a=b"}, ""},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_SDK_DISABLED", "TRUE"}, ""},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER", "none"}, ""},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER", "zipkin"}, "only over OTLP"},
		{[]string{ep, "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, "OTLP/HTTP"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"}, "OTLP/HTTP"},
		{[]string{ep, "127.0.0.1:4318"}, "not an http or https URL"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS", "authorization"}, "entry 1"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}, "gzip or none"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TIMEOUT", "5s"}, "milliseconds"},
		// More milliseconds than a duration holds wrapped around: 448µs, or a negative timeout.
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TIMEOUT", "18446744073710"}, "milliseconds"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "9223372036855"}, "milliseconds"},
		{[]string{ep, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent"}, "CERTIFICATE"},
	} {
		var log syncBuffer
		before := runtime.NumGoroutine()
		tr := Start(envOf(tc.env...), "test", logTo(&log))
		if tr != nil || tr.Provider() != nil {
			t.Errorf("%v: tracing on", tc.env)
		}
		tr.Shutdown() // a no-op on nil
		if after := runtime.NumGoroutine(); after > before {
			t.Errorf("%v: %d goroutines after Start, %d before", tc.env, after, before)
		}
		if (tc.warn == "") != (log.Len() == 0) || !strings.Contains(log.String(), tc.warn) {
			t.Errorf("%v: log %q, want %q", tc.env, log.String(), tc.warn)
		}
		if strings.Contains(log.String(), "authorization") && !strings.Contains(log.String(), "e.g.") {
			t.Errorf("%v: a header's text in the log: %q", tc.env, log.String())
		}
	}
	var log syncBuffer
	tr := Start(envOf("OTEL_TRACES_EXPORTER", "otlp"), "test", logTo(&log))
	if tr == nil || tr.exp.url != "http://localhost:4318/v1/traces" || log.Len() != 0 {
		t.Fatalf("OTEL_TRACES_EXPORTER=otlp alone: %+v %s", tr, log.String())
	}
	tr.Shutdown()
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct{ generic, signal, want string }{
		{"", "", "http://localhost:4318/v1/traces"},
		{"http://c:4318", "", "http://c:4318/v1/traces"},
		{"https://c:4318/", "", "https://c:4318/v1/traces"},
		{"http://c/otlp", "", "http://c/otlp/v1/traces"},
		{"http://c:4318", "http://d:1234", "http://d:1234/"},
		{"", "https://d/custom/path", "https://d/custom/path"},
	} {
		got, err := endpoint(envOf("OTEL_EXPORTER_OTLP_ENDPOINT", tc.generic, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.signal))
		if err != nil || got != tc.want {
			t.Errorf("%q %q: %q %v, want %q", tc.generic, tc.signal, got, err, tc.want)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h := http.Header{}
	if err := parseHeaders("H", " api-key = a%20b , x=1=2", h); err != nil {
		t.Fatal(err)
	}
	if err := parseHeaders("H2", "x=3", h); err != nil { // the signal's own wins
		t.Fatal(err)
	}
	if h.Get("Api-Key") != "a b" || h.Get("X") != "3" || len(h) != 2 {
		t.Errorf("%v", h)
	}
	for _, bad := range []string{"authorization: Bearer SECRET", "=SECRET", "a=%zzSECRET", "a b=SECRET", "a=SECRET%0Ac: d"} {
		if err := parseHeaders("H", bad, http.Header{}); err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b,c=d%20e", "a", "=", "a=%", "a=b%0D%0Ac:d", "k=v,,", "ä=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{}
		if err := parseHeaders("H", s, h); err != nil {
			return
		}
		for k, vs := range h {
			for _, v := range vs {
				if strings.ContainsAny(k+v, "\r\n") || k == "" {
					t.Fatalf("%q gave header %q: %q", s, k, v)
				}
			}
		}
	})
}

// spansOf runs fn with a tracer whose spans are recorded, and returns them finished.
func spansOf(t *testing.T, fn func(tr trace.Tracer)) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	fn(tp.Tracer("github.com/once-run/once"))
	_ = tp.Shutdown(context.Background())
	return rec.Ended()
}

// The exporter's body is an ExportTraceServiceRequest (decoded with the generated type), gzipped
// when asked; a 503 is tried again, a 400 is not.
func TestExporter(t *testing.T) {
	var calls atomic.Int32
	var got atomic.Pointer[coltracepb.ExportTraceServiceRequest]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Query().Get("fail") == "400":
			http.Error(w, "no", http.StatusBadRequest)
			return
		case n < 3:
			http.Error(w, "later", http.StatusServiceUnavailable)
			return
		}
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Errorf("gzip: %v", err)
			return
		}
		b, _ := io.ReadAll(z)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			t.Errorf("unmarshal: %v", err)
		}
		got.Store(req)
	}))
	defer srv.Close()
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	spans := spansOf(t, func(tr trace.Tracer) {
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
		_, s := tr.Start(ctx, "job", trace.WithAttributes(attribute.Int("n", -3), attribute.Bool("b", false),
			attribute.StringSlice("ss", []string{"x", ""}), attribute.Float64("f", 1.5), attribute.String("e", ""),
			attribute.Int64Slice("is", []int64{1, 2})), trace.WithLinks(trace.Link{SpanContext: parent}))
		s.AddEvent("ev", trace.WithAttributes(attribute.String("k", "v")))
		s.SetStatus(codes.Error, "boom")
		s.End()
		_, s = tr.Start(context.Background(), "second", trace.WithSpanKind(trace.SpanKindClient))
		s.End()
	})
	e, err := newExporter(envOf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces", "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), spans); err != nil || calls.Load() != 3 {
		t.Fatalf("export: %v after %d calls", err, calls.Load())
	}
	req := got.Load()
	want := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{refResourceSpans(spans)}}
	if !proto.Equal(req, want) {
		t.Errorf("request:\n%v\nwant:\n%v", req, want)
	}
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if sp.Name != "job" || sp.Status.Code != tracepb.Status_STATUS_CODE_ERROR || sp.Attributes[0].Value.GetIntValue() != -3 ||
		sp.Flags != 0x301 || len(sp.Links) != 1 || len(sp.ParentSpanId) != 8 {
		t.Errorf("span: %v", sp)
	}

	calls.Store(10)
	e, _ = newExporter(envOf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces?fail=400"), "t")
	if err := e.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), "400") || calls.Load() != 11 {
		t.Errorf("400: %v after %d calls", err, calls.Load()-10)
	}
}

// Shutdown gives up after the flush bound on a collector that never answers.
func TestShutdownBounded(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	var log syncBuffer
	tr := Start(envOf("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL, "OTEL_EXPORTER_OTLP_TIMEOUT", "200"), "t", logTo(&log))
	_, s := tr.Provider().Tracer("x").Start(context.Background(), "job")
	s.End()
	start := time.Now()
	tr.Shutdown()
	time.Sleep(300 * time.Millisecond) // the batcher, still sending, reports nothing more
	if d := time.Since(start); d > 5*time.Second || !strings.Contains(log.String(), "gave up") || strings.Count(log.String(), "OpenTelemetry") != 1 {
		t.Errorf("Shutdown took %s; log %q", d, log.String())
	}
}

func TestParent(t *testing.T) {
	ctx := Parent(context.Background(), envOf("TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "TRACESTATE", "a=b"))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.TraceState().String() != "a=b" || !sc.IsSampled() {
		t.Errorf("%v", sc)
	}
	for _, bad := range []string{"", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(Parent(context.Background(), envOf("TRACEPARENT", bad))); sc.IsValid() {
			t.Errorf("%q: %v", bad, sc)
		}
	}
}

// An export error names the collector by scheme and host only: the endpoint's password, path and
// query (an API key) are never in a log line.
func TestExportErrorHidesSecrets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	spans := spansOf(t, func(tr trace.Tracer) { _, s := tr.Start(context.Background(), "job"); s.End() })
	secret := strings.Replace(srv.URL, "http://", "http://key:PASSWORD@", 1)
	for _, ep := range []string{secret + "/v1/traces?api_key=QUERYKEY", "http://key:PASSWORD@127.0.0.1:1/v1/traces?api_key=QUERYKEY"} {
		e, err := newExporter(envOf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ep, "OTEL_EXPORTER_OTLP_TIMEOUT", "300"), "t")
		if err != nil {
			t.Fatal(err)
		}
		err = e.ExportSpans(context.Background(), spans)
		if err == nil || strings.Contains(err.Error(), "PASSWORD") || strings.Contains(err.Error(), "QUERYKEY") {
			t.Errorf("%s: error %v", ep, err)
		}
	}
}

// A collector's redirect is not followed: the spans' headers (an API key) do not go to another
// host, and the export is an error, not a GET taken for delivered.
func TestExportRedirectNotFollowed(t *testing.T) {
	var other atomic.Int32
	dst := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { other.Add(1) }))
	defer dst.Close()
	spans := spansOf(t, func(tr trace.Tracer) { _, s := tr.Start(context.Background(), "job"); s.End() })
	for _, code := range []int{302, 307} {
		src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, dst.URL+"/v1/traces", code)
		}))
		e, err := newExporter(envOf("OTEL_EXPORTER_OTLP_ENDPOINT", src.URL, "OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=KEY"), "t")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ExportSpans(context.Background(), spans); err == nil {
			t.Errorf("%d: exported", code)
		}
		src.Close()
	}
	if other.Load() != 0 {
		t.Errorf("the redirect's target got %d requests", other.Load())
	}
}
