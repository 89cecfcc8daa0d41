package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporter sends spans as OTLP over HTTP with protobuf bodies (an ExportTraceServiceRequest POSTed
// to /v1/traces), configured by the OTEL_EXPORTER_OTLP_* environment as the specification says.
// It is once's own rather than otlptracehttp: that package's request type comes from a generated
// package that also holds the gRPC service, and linking gRPC (and, through it, html/template,
// which keeps every exported method in the binary) made once 17 MB larger and its package init,
// paid at every start of once and of its shim, half as heavy again (docs/telemetry.md). The
// messages are written in transform.go.
type exporter struct {
	url     string
	shown   string // url as errors show it: scheme and host (a password, a path or a query may be a secret)
	headers http.Header
	gzip    bool
	timeout time.Duration // of one export, retries included
	client  *http.Client
}

// defaultExportTimeout is OTEL_EXPORTER_OTLP_TIMEOUT's default in the specification.
const defaultExportTimeout = 10 * time.Second

// newExporter reads the exporter's configuration; an error names the variable to fix.
func newExporter(getenv func(string) string, version string) (*exporter, error) {
	e := &exporter{headers: http.Header{}, timeout: defaultExportTimeout}
	var err error
	if e.url, err = endpoint(getenv); err != nil {
		return nil, err
	}
	e.shown = shownURL(e.url)
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} { // the second wins
		if err := parseHeaders(name, getenv(name), e.headers); err != nil {
			return nil, err
		}
	}
	e.headers.Set("Content-Type", "application/x-protobuf")
	e.headers.Set("User-Agent", "once/"+version)
	switch c := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"); c {
	case "gzip":
		e.gzip = true
		e.headers.Set("Content-Encoding", "gzip")
	case "", "none":
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION %q: use gzip or none", c)
	}
	if v := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"); v != "" {
		// At most what a time.Duration holds: 18446744073710 was multiplied into 448µs, a
		// timeout every export and the exit's flush missed (spans dropped), and larger ones into
		// negative durations.
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > int64(1<<63-1)/int64(time.Millisecond) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT %q: give milliseconds, e.g. 5000", v)
		}
		e.timeout = time.Duration(ms) * time.Millisecond
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tr.TLSClientConfig, err = tlsConfig(getenv); err != nil {
		return nil, err
	}
	// A redirect is not followed: on a 301, 302 or 303 the spans' POST would go on as a GET without
	// them (lost, and a 200 taken for delivered), and every redirect would carry the headers (an
	// API key in x-api-key: only Authorization is dropped) to wherever it points, over http too.
	e.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e, nil
}

// shownURL is an endpoint as log lines show it: its scheme and host, then "/…" when it has more.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(hidden URL)"
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		out += "/…"
	}
	return out
}

// endpoint is the URL spans are POSTed to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added to its path, else the default collector's.
func endpoint(getenv func(string) string) (string, error) {
	name, raw, signal := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), true
	if raw == "" {
		name, raw, signal = "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")), false
	}
	if raw == "" {
		raw = "http://localhost:4318"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s is not an http or https URL: give the collector's OTLP/HTTP URL, e.g. http://collector:4318", name)
	}
	switch {
	case !signal:
		u.Path = path.Join("/", u.Path, "v1/traces")
	case u.Path == "":
		u.Path = "/"
	}
	return u.String(), nil
}

// parseHeaders adds the headers of an OTEL_EXPORTER_OTLP_HEADERS value (key=value pairs separated
// by commas, values percent-encoded) to h, replacing those of the same name.
func parseHeaders(name, v string, h http.Header) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	i := 0
	for pair := range strings.SplitSeq(v, ",") {
		i++
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if !ok || k == "" || err != nil || !validHeader(k, dec) { // not shown: a header may be a secret
			return fmt.Errorf("%s: entry %d is not key=value with a header's name and a percent-encoded value, e.g. %s=authorization=Bearer%%20TOKEN", name, i, name)
		}
		h.Set(k, dec)
	}
	return nil
}

// validHeader says whether k and v can be sent as an HTTP header: a token, and no line breaks or
// other control characters (a value must not start another header).
func validHeader(k, v string) bool {
	for _, r := range k {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	for _, r := range v {
		if (r < ' ' && r != '\t') || r == 0x7f {
			return false
		}
	}
	return true
}

// tlsConfig is the TLS configuration of OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE (the CA's PEM file)
// and _CLIENT_CERTIFICATE/_CLIENT_KEY; nil (the system's roots) when none is set.
func tlsConfig(getenv func(string) string) (*tls.Config, error) {
	ca := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
	cert := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
	key := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE %s: no PEM certificate in it", ca)
		}
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _CLIENT_KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ExportSpans sends spans in one request, trying again after a failure the collector says is
// temporary (429, 502, 503, 504) or a broken connection, until the export's timeout or ctx ends; a
// refused connection (no collector there) fails at once, so that a collector that is down costs a
// short run nothing.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := e.body(spans)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		retry, err := e.post(ctx, body)
		if err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (then %w)", err, context.Cause(ctx))
		case <-time.After(wait):
		}
	}
}

// body is the ExportTraceServiceRequest of spans, gzipped when asked.
func (e *exporter) body(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	b := exportRequest(spans)
	if !e.gzip {
		return b, nil
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write(b) // a bytes.Buffer does not fail
	_ = w.Close()
	return z.Bytes(), nil
}

// post sends one request; retry says whether trying again may succeed.
func (e *exporter) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header = e.headers.Clone()
	resp, err := e.client.Do(req)
	if err != nil {
		retry := !errors.Is(err, syscall.ECONNREFUSED) && ctx.Err() == nil
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = fmt.Errorf("OTLP collector %s: %w", e.shown, ue.Err) // its text repeats the URL
		}
		return retry, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	err = fmt.Errorf("OTLP collector %s: %s: %q", e.shown, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, err
	}
	return false, err
}

// Shutdown closes the exporter's idle connections; the provider has already flushed.
func (e *exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}
