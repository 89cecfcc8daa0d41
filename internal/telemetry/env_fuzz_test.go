package telemetry

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzExporterEnv: whatever the OTEL_EXPORTER_OTLP_* variables hold, the exporter is made with a
// timeout that is the milliseconds given (positive, never wrapped around), an http or https URL
// with a host, and errors that are one line and show no endpoint's password; or it is refused.
func FuzzExporterEnv(f *testing.F) {
	f.Add("http://127.0.0.1:4318", "", "5000", "gzip", false)
	f.Add("https://u:PASSWORD@h/base/", "a=b", "18446744073710", "", true)
	f.Add("http://h", "", "9223372036854", "none", false)
	f.Add("h:4318", "", "-1", "zstd", false)
	f.Add("http://[::1]:4318/v1/traces?k=v", "x=%0A", "0", "", true)
	f.Fuzz(func(t *testing.T, endpoint, headers, timeout, compression string, signal bool) {
		name := "OTEL_EXPORTER_OTLP_ENDPOINT"
		if signal {
			name = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		}
		e, err := newExporter(envOf(name, endpoint, "OTEL_EXPORTER_OTLP_HEADERS", headers,
			"OTEL_EXPORTER_OTLP_TIMEOUT", timeout, "OTEL_EXPORTER_OTLP_COMPRESSION", compression), "t")
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("multi-line error %q", err)
			}
			if u, perr := url.Parse(strings.TrimSpace(endpoint)); perr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Contains(err.Error(), pw) {
					t.Fatalf("the error shows the password: %v", err)
				}
			}
			return
		}
		want := defaultExportTimeout
		if v := strings.TrimSpace(timeout); v != "" {
			ms, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || ms <= 0 {
				t.Fatalf("timeout %q accepted", timeout)
			}
			if want = time.Duration(ms) * time.Millisecond; want/time.Millisecond != time.Duration(ms) {
				t.Fatalf("timeout %q accepted as %v", timeout, e.timeout)
			}
		}
		if e.timeout != want || e.timeout <= 0 {
			t.Fatalf("timeout %q read as %v, want %v", timeout, e.timeout, want)
		}
		u, err := url.Parse(e.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("endpoint %q gave the URL %q", endpoint, e.url)
		}
		if strings.Contains(e.shown, "@") {
			t.Fatalf("shown URL %q", e.shown)
		}
	})
}
