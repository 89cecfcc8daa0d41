package web

import (
	"fmt"
	"net/url"
	"sort"
	"time"
)

// The timeline as an SVG drawn on the server: a row per task, a bar per attempt from its start
// to its end (now while running), a mark per event; bars of one task that overlap in time are
// red and name each other; a running attempt whose holder is gone is drawn apart (class gone).

const (
	tlLabel = 200.0 // the task names' column
	tlWidth = 900.0 // the bars' column
	tlRight = 40.0  // room right of the bars for the last tick's label, centred on their end
	tlRow   = 24.0
	tlTop   = 28.0 // the time axis
	tlBar   = 18.0 // a bar's height, shared by the lanes of attempts that overlap
)

// barLanes gives each bar of a row its lane and the number of lanes of its cluster (bars linked
// by overlapping in time): overlapping attempts are drawn one above the other, each visible,
// instead of one over the other; a bar that overlaps nothing has the row to itself.
func barLanes(bars []Bar) (lane, lanes []int) {
	lane, lanes = make([]int, len(bars)), make([]int, len(bars))
	idx := make([]int, len(bars))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return bars[idx[a]].Start.Before(bars[idx[b]].Start) })
	var cluster []int
	var ends []time.Time // per lane of the cluster: the end of its last bar
	var clusterEnd time.Time
	flush := func() {
		for _, i := range cluster {
			lanes[i] = len(ends)
		}
		cluster, ends = cluster[:0], ends[:0]
	}
	for _, i := range idx {
		b := bars[i]
		if len(cluster) > 0 && !b.Start.Before(clusterEnd) {
			flush()
		}
		l := 0
		for l < len(ends) && b.Start.Before(ends[l]) {
			l++
		}
		if l == len(ends) {
			ends = append(ends, b.End)
		} else {
			ends[l] = b.End
		}
		lane[i] = l
		cluster = append(cluster, i)
		if len(cluster) == 1 || b.End.After(clusterEnd) {
			clusterEnd = b.End
		}
	}
	flush()
	return lane, lanes
}

// drawn is a timeline with its geometry, for templates/timeline.html.
type drawn struct {
	Timeline
	Task          string
	Width, Height float64
	Label         float64
	Rows          []drawnRow
	Ticks         []drawnTick
	FromParam     string
	ToParam       string
	Earlier       string // query of the range before
	Later         string // query of the range after ("" when it would reach past now)
}

type drawnRow struct {
	Task   string
	Y      float64
	LabelY float64
	Bars   []drawnBar
	Marks  []drawnMark
}

type drawnBar struct {
	Bar
	X, Y, W, H float64
	Class      string
	Title      string
}

type drawnMark struct {
	Mark
	D     string // the mark's path: a small triangle above the row's bars
	Title string
}

type drawnTick struct {
	X    float64
	Text string
}

func drawTimeline(tl Timeline, task string) drawn {
	d := drawn{Timeline: tl, Task: task, Label: tlLabel, Width: tlLabel + tlWidth + tlRight,
		FromParam: tl.From.Format(time.RFC3339), ToParam: tl.To.Format(time.RFC3339)}
	span := tl.To.Sub(tl.From)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(tl.From)) / float64(span)
		if f < 0 {
			f = 0
		}
		if f > 1 {
			f = 1
		}
		return tlLabel + f*tlWidth
	}
	for i, t := range tl.Tasks {
		y := tlTop + float64(i)*tlRow
		row := drawnRow{Task: t, Y: y, LabelY: y + 14}
		bars := tl.Bars[t]
		lane, lanes := barLanes(bars)
		for i, b := range bars {
			h := tlBar / float64(lanes[i])
			db := drawnBar{Bar: b, X: x(b.Start), Y: y + 3 + float64(lane[i])*h, H: h, Class: "bar " + string(b.State)}
			db.W = x(b.End) - db.X
			if db.W < 2 {
				db.W = 2
			}
			db.Title = fmt.Sprintf("%s slot %s attempt %d: %s on %s, %s → %s", b.Task, orDash(b.Slot), b.Attempt, b.State, b.Holder,
				b.Start.Format(time.RFC3339), b.End.Format(time.RFC3339))
			if b.HolderGone {
				db.Class += " gone"
				db.Title += "; HOLDER GONE: its lease is gone, nobody knows whether it finished (the overview has the once resolve commands)"
			}
			if len(b.Overlap) > 0 {
				db.Class += " overlap"
				db.Title += "; OVERLAPS " + fmt.Sprint(b.Overlap)
			}
			row.Bars = append(row.Bars, db)
		}
		for _, m := range tl.Marks[t] {
			row.Marks = append(row.Marks, drawnMark{Mark: m, D: fmt.Sprintf("M%.1f %.1f l-4 -7 h8 z", x(m.At), y+10),
				Title: fmt.Sprintf("%s slot %s: %s (%s) at %s", m.Task, orDash(m.Slot), m.Kind, m.Holder, m.At.Format(time.RFC3339))})
		}
		d.Rows = append(d.Rows, row)
	}
	d.Height = tlTop + float64(len(tl.Tasks))*tlRow + 8
	// Ticks less than a minute apart are labelled to the second: to the minute they read alike.
	layout := "01-02 15:04"
	if span/6 < time.Minute {
		layout = "15:04:05"
	}
	for i := 0; i <= 6; i++ {
		t := tl.From.Add(span * time.Duration(i) / 6)
		d.Ticks = append(d.Ticks, drawnTick{X: x(t), Text: t.Format(layout)})
	}
	q := func(from, to time.Time) string {
		v := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
		if task != "" {
			v.Set("task", task)
		}
		return v.Encode()
	}
	d.Earlier = q(tl.From.Add(-span), tl.From)
	d.Later = q(tl.To, tl.To.Add(span))
	return d
}
