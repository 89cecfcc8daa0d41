package metrics

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestExpositionEscapes: what the sink writes, hostile label values and help included, reads
// back through the Prometheus client's parser as the values given (invalid UTF-8 replaced).
func TestExpositionEscapes(t *testing.T) {
	d := newDesc("gauge", "once_test_gauge", "Help with a \\ backslash\nand a newline.", "task", "holder")
	h := newDesc("histogram", "once_test_seconds", "A histogram.", "task")
	w := newSink()
	hostile := "a\"b\\c\nd\xffe"
	w.gauge(d, 1.5, hostile, "node-1")
	w.gauge(d, 2, "plain", "")
	w.histogram(h, 3, 4.5, []float64{1, 10}, []uint64{1, 2}, hostile)
	var buf bytes.Buffer
	if err := w.write(&buf); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, buf.String())
	}
	g := fams["once_test_gauge"]
	if g.GetHelp() != "Help with a \\ backslash\nand a newline." || len(g.GetMetric()) != 2 {
		t.Fatalf("gauge family: %v", g)
	}
	want := "a\"b\\c\nd\uFFFDe"
	var found bool
	for _, m := range g.GetMetric() {
		ls := map[string]string{}
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		if ls["task"] == want && ls["holder"] == "node-1" && m.GetGauge().GetValue() == 1.5 {
			found = true
		}
	}
	if !found {
		t.Errorf("hostile label value not read back as %q: %v", want, g.GetMetric())
	}
	hist := fams["once_test_seconds"].GetMetric()
	if len(hist) != 1 || hist[0].GetHistogram().GetSampleCount() != 3 || len(hist[0].GetHistogram().GetBucket()) != 3 { // 1, 10 and +Inf
		t.Errorf("histogram: %v", hist)
	}
}

// TestHandlerGzip: a scraper that accepts gzip gets it (as Prometheus asks), one that does not, or
// gives it a weight of 0, gets plain text; both parse.
func TestHandlerGzip(t *testing.T) {
	st, _ := openStore(t)
	c := newCollector(t, Config{Store: st})
	for _, tc := range []struct {
		accept string
		gz     bool
	}{{"gzip", true}, {"deflate, GZIP;q=0.5", true}, {"x-gzip", true}, {"gzip;q=0", false}, {"gzip; Q=0.000", false}, {"", false}, {"identity", false}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.accept != "" {
			req.Header.Set("Accept-Encoding", tc.accept)
		}
		c.Handler().ServeHTTP(rec, req)
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gz {
			t.Errorf("Accept-Encoding %q: gzipped %v, want %v", tc.accept, got, tc.gz)
		}
		if !strings.Contains(rec.Header().Get("Vary"), "Accept-Encoding") {
			t.Errorf("Accept-Encoding %q: no Vary: Accept-Encoding", tc.accept)
		}
		var body io.Reader = rec.Body
		if tc.gz {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(body)
		if err != nil || fams["once_store_up"] == nil {
			t.Errorf("Accept-Encoding %q: %v, %d families", tc.accept, err, len(fams))
		}
	}
}
