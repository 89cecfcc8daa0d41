package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/slot"
)

func TestParseBound(t *testing.T) {
	day, _ := slot.New("day", "", "", "UTC")
	week, _ := slot.New("week", "", "", "UTC")
	sched, _ := slot.New("", "0 2 * * *", "", "UTC")
	utc := func(s string) time.Time { x, _ := time.Parse(time.RFC3339Nano, s); return x }
	for _, c := range []struct {
		spec  slot.Spec
		value string
		isTo  bool
		want  time.Time
	}{
		{day, "2026-11-03", false, utc("2026-11-03T00:00:00Z")},
		{day, "2026-11-03", true, utc("2026-11-03T00:00:00Z")}, // exact slot value: its start
		{week, "2026-11-04", false, utc("2026-11-02T00:00:00Z")},
		{week, "2026-11-04", true, utc("2026-11-04T23:59:59.999999999Z")},
		{week, "2026-W45", false, utc("2026-11-02T00:00:00Z")},
		{sched, "2026-11-04", false, utc("2026-11-04T00:00:00Z")},
		{sched, "2026-11-04T02:00:00+00:00", true, utc("2026-11-04T02:00:00Z")},
	} {
		got, err := parseBound(c.spec, c.value, c.isTo)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("parseBound(%s, %q, %v) = %v, %v; want %v", c.spec, c.value, c.isTo, got, err, c.want)
		}
	}
	for _, v := range []string{"", "yesterday", "2026-13-01", "2026-11-03T25"} {
		if _, err := parseBound(day, v, false); err == nil {
			t.Errorf("parseBound(%q): no error", v)
		}
	}
}

func FuzzParseBound(f *testing.F) {
	specs := []slot.Spec{}
	for _, p := range []string{"minute", "hour", "day", "week", "month"} {
		s, _ := slot.New(p, "", "", "America/New_York")
		specs = append(specs, s)
	}
	s, _ := slot.New("", "30 2 * * *", "", "Europe/Berlin")
	specs = append(specs, s)
	for _, v := range []string{"2026-11-03", "2026-W45", "2026-11", "2026-11-03T02", "2026-11-03T02:05", "2026-11-03T02:30:00+01:00", "x"} {
		f.Add(v, uint8(0), false)
		f.Add(v, uint8(5), true)
	}
	f.Fuzz(func(t *testing.T, v string, which uint8, isTo bool) {
		spec := specs[int(which)%len(specs)]
		got, err := parseBound(spec, v, isTo)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if got.IsZero() {
			t.Fatalf("parseBound(%q) = zero time", v)
		}
	})
}
