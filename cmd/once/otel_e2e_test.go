package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver: it decodes each request as the real
// ExportTraceServiceRequest of the OTLP protocol (the generated type collectors use), so once's
// exporter is tested end to end.
type collector struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	req []*coltracepb.ExportTraceServiceRequest
	hdr []http.Header
}

func newCollector(t *testing.T) *collector {
	c := &collector{t: t}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.t.Errorf("collector: %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			c.t.Errorf("collector: gzip: %v", err)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(b, req)
	}
	if err != nil {
		c.t.Errorf("collector: not an ExportTraceServiceRequest: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.req, c.hdr = append(c.req, req), append(c.hdr, r.Header.Clone())
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// gotSpan is a span as received, with its resource's attributes.
type gotSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (s gotSpan) attr(k string) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return anyText(kv.Value)
		}
	}
	return ""
}

func anyText(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return v.String()
}

// spans are every span received so far, in order.
func (c *collector) spans() []gotSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []gotSpan
	for _, req := range c.req {
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, kv := range rs.Resource.GetAttributes() {
				res[kv.Key] = anyText(kv.Value)
			}
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.GetName() != "github.com/once-run/once" {
					c.t.Errorf("scope %q", ss.Scope.GetName())
				}
				for _, sp := range ss.Spans {
					out = append(out, gotSpan{sp, res})
				}
			}
		}
	}
	return out
}

func (c *collector) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.req)
}

// traced is e sending its spans to c, as a user sets it up.
func (e *env) traced(c *collector, extra ...string) *env {
	e.vars = append(e.vars, "OTEL_EXPORTER_OTLP_ENDPOINT="+c.srv.URL, "OTEL_SERVICE_NAME=nightly",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test", "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20s3cret")
	e.vars = append(e.vars, extra...)
	return e
}

// lastSpan is the one span a run added since had spans were received: once run exports before it
// exits, so there is no waiting.
func lastSpan(t *testing.T, c *collector, had int) gotSpan {
	t.Helper()
	ss := c.spans()
	if len(ss) != had+1 {
		t.Fatalf("%d spans received by the time once run exited, want %d: %v", len(ss), had+1, ss)
	}
	return ss[had]
}

// A succeeded, a skipped, a failed and a busy run and a review each export their span before
// once run exits, with the attributes and status of the ledger.
func TestOtelSpans(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	e := newEnv(t).traced(c)
	r := e.run("run", "--task", "nightly", "--slot", "s1", "--", "true")
	if r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	sp := lastSpan(t, c, 0)
	want := map[string]string{"once.task": "nightly", "once.slot": "s1", "once.decision": "ran", "once.state": "succeeded",
		"once.exit_code": "0", "once.attempt": "1"}
	for k, v := range want {
		if got := sp.attr(k); got != v {
			t.Errorf("succeeded span: %s = %q, want %q", k, got, v)
		}
	}
	if sp.Name != "nightly" || sp.Status.GetCode() != tracepb.Status_STATUS_CODE_UNSET || sp.attr("once.run_id") == "" ||
		!strings.Contains(sp.attr("once.holder"), ":") || sp.attr("once.fencing_token") == "" || sp.attr("once.fencing_token") == "0" {
		t.Errorf("succeeded span: %v", sp.Span)
	}
	if sp.resource["service.name"] != "nightly" || sp.resource["deployment.environment"] != "test" || sp.resource["host.name"] == "" {
		t.Errorf("resource: %v", sp.resource)
	}
	c.mu.Lock()
	auth := c.hdr[0].Get("Authorization")
	c.mu.Unlock()
	if h := auth; h != "Bearer s3cret" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS: Authorization %q", h)
	}

	r = e.run("run", "--task", "nightly", "--slot", "s1", "--", "true")
	sp = lastSpan(t, c, 1)
	if r.code != 0 || sp.attr("once.decision") != "skipped" || sp.attr("once.state") != "succeeded" || !strings.Contains(sp.attr("once.reason"), "already succeeded") {
		t.Errorf("skipped: exit %d, span %v", r.code, sp.Span)
	}

	r = e.run("run", "--task", "nightly", "--slot", "s2", "--max-attempts", "1", "--", "sh", "-c", "exit 3")
	sp = lastSpan(t, c, 2)
	if r.code != 3 || sp.attr("once.state") != "failed" || sp.attr("once.exit_code") != "3" ||
		sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(sp.Status.GetMessage(), "failed") {
		t.Errorf("failed: exit %d, span %v", r.code, sp.Span)
	}
	r = e.run("run", "--task", "nightly", "--slot", "s2", "--max-attempts", "1", "--", "true")
	sp = lastSpan(t, c, 3)
	if r.code != 76 || sp.attr("once.decision") != "review" || sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("review: exit %d, span %v", r.code, sp.Span)
	}
}

// A run that finds the task running on this machine exports a busy span.
func TestOtelBusy(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	e := newEnv(t).traced(c)
	marker := t.TempDir() + "/started"
	hold := e.cmd(t.Context(), "run", "--task", "held", "--", "sh", "-c", "touch "+marker+"; sleep 30")
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Process.Signal(syscall.SIGTERM); _ = hold.Wait() }()
	waitFile(t, marker, 30*time.Second)
	r := e.run("run", "--task", "held", "--", "true")
	ss := c.spans()
	if r.code != 75 || len(ss) != 1 || ss[0].attr("once.decision") != "busy" || !strings.Contains(ss[0].attr("once.reason"), "lock") {
		t.Fatalf("busy: exit %d %s, spans %v", r.code, r.stderr, ss)
	}
}

func waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, within)
		}
	}
}

// The command gets its attempt's span as TRACEPARENT; a run given a TRACEPARENT (a traced
// scheduler) is a child of that span, in its trace.
func TestOtelTraceparent(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	e := newEnv(t).traced(c)
	r := e.run("run", "--task", "tp", "--", "sh", "-c", `echo "$TRACEPARENT"`)
	sp := lastSpan(t, c, 0)
	tid, sid := hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.SpanId)
	if got, want := strings.TrimSpace(r.stdout), "00-"+tid+"-"+sid+"-01"; got != want || len(sp.ParentSpanId) != 0 {
		t.Errorf("TRACEPARENT of the command %q, want %q (parent %x)", got, want, sp.ParentSpanId)
	}

	parentTrace, parentSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	e.vars = append(e.vars, "TRACEPARENT=00-"+parentTrace+"-"+parentSpan+"-01", "TRACESTATE=vendor=x")
	r = e.run("run", "--task", "tp", "--", "sh", "-c", `echo "$TRACEPARENT $TRACESTATE"`)
	sp = lastSpan(t, c, 1)
	if hex.EncodeToString(sp.TraceId) != parentTrace || hex.EncodeToString(sp.ParentSpanId) != parentSpan || sp.TraceState != "vendor=x" {
		t.Errorf("not a child of TRACEPARENT: trace %x parent %x state %q", sp.TraceId, sp.ParentSpanId, sp.TraceState)
	}
	if got, want := strings.TrimSpace(r.stdout), "00-"+parentTrace+"-"+hex.EncodeToString(sp.SpanId)+"-01 vendor=x"; got != want {
		t.Errorf("TRACEPARENT TRACESTATE of the command %q, want %q", got, want)
	}
}

// Without an endpoint (or with tracing disabled) nothing is sent, and an incoming TRACEPARENT
// reaches the command as it came.
func TestOtelOff(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	in := "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, vars := range [][]string{
		{"OTEL_SERVICE_NAME=x", in},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.srv.URL, "OTEL_SDK_DISABLED=true", in},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + c.srv.URL + "/v1/traces", "OTEL_TRACES_EXPORTER=none", in},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", in},
	} {
		e := newEnv(t)
		e.vars = append(e.vars, vars...)
		r := e.run("run", "--task", "off", "--", "sh", "-c", `echo "$TRACEPARENT"`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != strings.TrimPrefix(in, "TRACEPARENT=") {
			t.Errorf("%v: exit %d, TRACEPARENT %q, %s", vars, r.code, r.stdout, r.stderr)
		}
		if grpc := strings.Contains(strings.Join(vars, " "), "grpc"); grpc != strings.Contains(r.stderr, "OTLP/HTTP") {
			t.Errorf("%v: stderr %q", vars, r.stderr)
		}
	}
	if n := c.requests(); n != 0 {
		t.Errorf("%d requests reached the collector with tracing off", n)
	}
}

// A collector that refuses connections or never answers changes neither the exit status nor,
// beyond the flush bound (1 s, or OTEL_EXPORTER_OTLP_TIMEOUT), when once run exits. Not parallel:
// it checks a time.
func TestOtelCollectorDown(t *testing.T) {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "http://" + refused.Addr().String()
	refused.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the kernel's backlog), never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentURL := "http://" + silent.Addr().String()

	base := newEnv(t).run("run", "--task", "down", "--", "sh", "-c", "exit 7")
	for _, tc := range []struct {
		name  string
		vars  []string
		bound time.Duration
		warn  string
	}{
		{"refused", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + refusedURL}, time.Second, "connection refused"},
		{"silent", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + silentURL}, time.Second, "gave up exporting spans\" after=1s"},
		{"silent, timeout 300ms", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + silentURL, "OTEL_EXPORTER_OTLP_TIMEOUT=300"}, 300 * time.Millisecond, "after=300ms"},
	} {
		e := newEnv(t)
		e.vars = append(e.vars, tc.vars...)
		r := e.run("run", "--task", "down", "--", "sh", "-c", "exit 7")
		t.Logf("%s: %s (without tracing %s)", tc.name, r.dur.Round(time.Millisecond), base.dur.Round(time.Millisecond))
		if r.code != 7 || !strings.Contains(r.stderr, tc.warn) || strings.Count(r.stderr, "OpenTelemetry") != 1 {
			t.Errorf("%s: exit %d, want 7; stderr %q, want %q", tc.name, r.code, r.stderr, tc.warn)
		}
		// Generous for a loaded machine, yet well short of the exporter's own 10 s default.
		if slack := 4 * time.Second; r.dur > base.dur+tc.bound+slack {
			t.Errorf("%s: once run took %s, without tracing %s: more than the %s bound (+%s slack)", tc.name, r.dur, base.dur, tc.bound, slack)
		}
	}
}

// The daemon exports a span per job run, each the root of its own trace.
func TestOtelDaemon(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	e := newEnv(t).traced(c, "OTEL_BSP_SCHEDULE_DELAY=200")
	dir := t.TempDir()
	jobs := writeJobs(t, dir, "jobs.toml", "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = \"true\"\n")
	d := startDaemon(t, e, "node-a", "--jobs", jobs)
	deadline := time.Now().Add(60 * time.Second)
	for len(c.spans()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans from the daemon within 60 s", len(c.spans()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("daemon exited %d", code)
	}
	ss := c.spans()
	if ss[0].Name != "tick" || ss[0].attr("once.state") != "succeeded" || ss[0].attr("once.holder") != "node-a" ||
		len(ss[0].ParentSpanId) != 0 || string(ss[0].TraceId) == string(ss[1].TraceId) || ss[0].attr("once.slot") == ss[1].attr("once.slot") {
		t.Errorf("daemon spans: %v / %v", ss[0].Span, ss[1].Span)
	}
}
