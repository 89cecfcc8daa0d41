package web

import (
	"testing"
	"time"
)

// Overlapping attempts of one task are drawn in lanes of their row, one above the other; an
// attempt that overlaps nothing keeps the whole row.
func TestBarLanes(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	bar := func(run string, from, to int) Bar {
		return Bar{RunID: run, Start: t0.Add(time.Duration(from) * time.Second), End: t0.Add(time.Duration(to) * time.Second)}
	}
	// Not in start order, as a timeline reads them (newest first).
	bars := []Bar{bar("e", 13, 14), bar("c", 12, 13), bar("d", 4, 8), bar("b", 3, 5), bar("a", 0, 10)}
	lane, lanes := barLanes(bars)
	want := map[string][2]int{"a": {0, 3}, "b": {1, 3}, "d": {2, 3}, "c": {0, 1}, "e": {0, 1}}
	for i, b := range bars {
		if got := [2]int{lane[i], lanes[i]}; got != want[b.RunID] {
			t.Errorf("bar %s: lane %d of %d, want %d of %d", b.RunID, got[0], got[1], want[b.RunID][0], want[b.RunID][1])
		}
	}

	d := drawTimeline(Timeline{From: t0, To: t0.Add(time.Minute), Tasks: []string{"x"}, Bars: map[string][]Bar{"x": {bar("a", 0, 10), bar("b", 3, 5)}}}, "")
	a, b := d.Rows[0].Bars[0], d.Rows[0].Bars[1]
	if a.H != tlBar/2 || b.H != tlBar/2 || b.Y != a.Y+a.H {
		t.Errorf("two overlapping bars: a y=%.1f h=%.1f, b y=%.1f h=%.1f; want each half the row, b below a", a.Y, a.H, b.Y, b.H)
	}
}
