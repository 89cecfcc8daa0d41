package metrics

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// FuzzLabelValues: any two label values (a task, a holder: names from the store, which anyone who
// could write to it chose) and any help text are written so that the Prometheus client's parser
// reads back one series with exactly those values (invalid UTF-8 replaced by U+FFFD, which the
// format requires), and no line of its own: a newline or quote in a value cannot end the series
// or add a forged one.
func FuzzLabelValues(f *testing.F) {
	for _, s := range [][3]string{
		{"nightly", "host-1", "Help."},
		{"a\"b\\c\nd\xffe", "x} 1\nforged{task=\"y\"} 2", "h\\\n"},
		{"", "\\", "\\n"},
		{"\u2028\u0085\x00", "\"", "# TYPE x counter\n"},
		{"\\\"", "\n\n", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, task, holder, help string) {
		d := newDesc("gauge", "once_fuzz_gauge", "Fuzz. "+help, "task", "holder")
		w := newSink()
		w.gauge(d, 7, task, holder)
		var buf bytes.Buffer
		if err := w.write(&buf); err != nil {
			t.Fatal(err)
		}
		text := buf.String()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(&buf)
		if err != nil {
			t.Fatalf("parse: %v\n%s", err, text)
		}
		if len(fams) != 1 || fams["once_fuzz_gauge"] == nil {
			t.Fatalf("families %v\n%s", fams, text)
		}
		g := fams["once_fuzz_gauge"]
		if want := strings.ToValidUTF8("Fuzz. "+help, "\uFFFD"); g.GetHelp() != want {
			t.Fatalf("help %q, want %q", g.GetHelp(), want)
		}
		ms := g.GetMetric()
		if len(ms) != 1 || ms[0].GetGauge().GetValue() != 7 {
			t.Fatalf("series %v\n%s", ms, text)
		}
		got := map[string]string{}
		for _, l := range ms[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for name, v := range map[string]string{"task": task, "holder": holder} {
			if want := strings.ToValidUTF8(v, "\uFFFD"); got[name] != want {
				t.Fatalf("label %s read back as %q, want %q\n%s", name, got[name], want, text)
			}
		}
	})
}
