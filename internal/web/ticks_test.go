package web

import (
	"testing"
	"time"
)

// The time axis of a short range: every tick's label differs from the others (to the minute, a
// range of a few minutes read "01:05" at every tick), and the last one fits in the drawing.
func TestTimelineTicks(t *testing.T) {
	from := time.Date(2026, 12, 2, 1, 4, 57, 0, time.UTC)
	for _, span := range []time.Duration{22 * time.Second, 2 * time.Minute, 6 * time.Minute, 7 * time.Minute, 24 * time.Hour, 31 * 24 * time.Hour} {
		d := drawTimeline(Timeline{From: from, To: from.Add(span)}, "")
		seen := map[string]bool{}
		for _, tk := range d.Ticks {
			if seen[tk.Text] {
				t.Errorf("range %s: two ticks read %q: %+v", span, tk.Text, d.Ticks)
			}
			seen[tk.Text] = true
		}
		last := d.Ticks[len(d.Ticks)-1]
		// 10px labels of up to 11 characters, centred on the tick: about 30px each side.
		if d.Width-last.X < 30 {
			t.Errorf("range %s: the last tick's label is centred %.0fpx from the drawing's right edge: it is cut", span, d.Width-last.X)
		}
	}
}
