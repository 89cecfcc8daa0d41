package web

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// Bar is one attempt on the timeline.
type Bar struct {
	Task    string      `json:"task"`
	Slot    string      `json:"slot"`
	Attempt int         `json:"attempt"`
	RunID   string      `json:"run_id"`
	Holder  string      `json:"holder"`
	State   store.State `json:"state"`
	Start   time.Time   `json:"start"`
	End     time.Time   `json:"end"`             // now for a running attempt
	Running bool        `json:"running"`         // no end yet
	Seats   int         `json:"seats,omitempty"` // the Limit of the seat it ran under (once run --limit), 0 when exclusive
	// HolderGone is true for an attempt still recorded as running whose holder's lease is gone (the
	// overview's holder gone; GET /api/v1/running): it is drawn to now, but nothing runs it.
	HolderGone bool `json:"holder_gone,omitempty"`
	// Overlap names the other attempts of the same task that ran at the same time as this one,
	// by holder and run id: the seed's incident, two holders at once.
	Overlap []string `json:"overlap,omitempty"`
}

// Mark is an event on the timeline: busy, skipped, review or missed.
type Mark struct {
	Task   string      `json:"task"`
	Slot   string      `json:"slot"`
	Kind   store.State `json:"kind"`
	Holder string      `json:"holder"`
	At     time.Time   `json:"at"`
	Note   string      `json:"note,omitempty"`
}

// Overlap is two attempts of one task that ran at the same time.
type Overlap struct {
	Task string `json:"task"`
	A    Bar    `json:"a"`
	B    Bar    `json:"b"`
}

// Timeline is what ran in [From, To], per task.
type Timeline struct {
	From     time.Time         `json:"from"`
	To       time.Time         `json:"to"`
	Tasks    []string          `json:"tasks"`
	Bars     map[string][]Bar  `json:"bars"`
	Marks    map[string][]Mark `json:"marks"`
	Overlaps []Overlap         `json:"overlaps"`
	// Truncated is true when the range held more than maxTimeline entries: the newest are shown.
	Truncated bool `json:"truncated"`
}

// timeline reads the entries of [from, to] newest first, at most maxTimeline of them, and the
// attempts that started up to one range earlier and were still running into it. It costs one
// ordered index walk from to (a page per HistoryPager page) and, when an attempt in it is still
// running, the list of attempts running (s.gone), to mark those whose holder is gone.
func (s *Server) timeline(ctx context.Context, from, to time.Time, task string) (Timeline, error) {
	tl := Timeline{From: from, To: to, Tasks: []string{}, Bars: map[string][]Bar{}, Marks: map[string][]Mark{}, Overlaps: []Overlap{}}
	now := s.c.Now()
	lookback := from.Add(-to.Sub(from))
	n := 0
	q := store.HistoryQuery{Task: task, Before: timeCursor(to)}
	err := store.EachHistory(ctx, s.c.Store, q, func(e store.Entry) error {
		if e.StartedAt.Before(lookback) {
			return errStop
		}
		if n++; n > maxTimeline {
			tl.Truncated = true
			return errStop
		}
		if e.State.IsEvent() {
			if !e.StartedAt.Before(from) {
				tl.Marks[e.Task] = append(tl.Marks[e.Task], Mark{Task: e.Task, Slot: e.Slot, Kind: e.State, Holder: e.Holder, At: e.StartedAt, Note: e.Note})
			}
			return nil
		}
		b := Bar{Task: e.Task, Slot: e.Slot, Attempt: e.Number, RunID: e.RunID, Holder: e.Holder, State: e.State, Start: e.StartedAt,
			Seats: e.Limit}
		if e.EndedAt != nil {
			b.End = *e.EndedAt
		} else {
			b.End, b.Running = now, true
		}
		if b.End.Before(from) {
			return nil
		}
		tl.Bars[e.Task] = append(tl.Bars[e.Task], b)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return Timeline{}, err
	}
	s.markGone(ctx, tl.Bars)
	seen := map[string]bool{}
	for t := range tl.Bars {
		seen[t] = true
	}
	for t := range tl.Marks {
		seen[t] = true
	}
	for t := range seen {
		tl.Tasks = append(tl.Tasks, t)
	}
	sort.Strings(tl.Tasks)
	for _, t := range tl.Tasks {
		tl.Overlaps = append(tl.Overlaps, overlaps(t, tl.Bars[t])...)
	}
	return tl, nil
}

// markGone marks the running bars whose holder is gone; it reads the attempts running (s.gone)
// only when a bar is running.
func (s *Server) markGone(ctx context.Context, bars map[string][]Bar) {
	var gone map[string]Running
	for _, bs := range bars {
		for i := range bs {
			if !bs[i].Running {
				continue
			}
			if gone == nil {
				if gone = s.gone(ctx); gone == nil {
					return
				}
			}
			_, bs[i].HolderGone = gone[goneKey(bs[i].Task, bs[i].Slot, bs[i].RunID, bs[i].Attempt)]
		}
	}
}

// overlaps sorts one task's bars by start and marks every pair that ran at the same time (one
// started before the other ended), naming each in the other's Overlap; but for seats' attempts of
// different slots, which may (store.Concurrent).
func overlaps(task string, bars []Bar) []Overlap {
	sort.Slice(bars, func(i, j int) bool { return bars[i].Start.Before(bars[j].Start) })
	var out []Overlap
	for i := range bars {
		for j := i + 1; j < len(bars) && bars[j].Start.Before(bars[i].End); j++ {
			if bars[j].RunID == bars[i].RunID || store.Concurrent(bars[i].attempt(), bars[j].attempt()) {
				continue
			}
			bars[i].Overlap = append(bars[i].Overlap, who(bars[j]))
			bars[j].Overlap = append(bars[j].Overlap, who(bars[i]))
			out = append(out, Overlap{Task: task, A: bars[i], B: bars[j]})
		}
	}
	return out
}

// attempt is what store.Concurrent reads of a bar.
func (b Bar) attempt() store.Attempt { return store.Attempt{Slot: b.Slot, Limit: b.Seats} }

func who(b Bar) string { return b.Holder + " (" + b.RunID + ")" }

// progress reads a reported progress "DONE/TOTAL"; total is 0 when it is not in that form.
func progress(p string) (done, total float64) {
	d, t, ok := strings.Cut(p, "/")
	if !ok {
		return 0, 0
	}
	dv, err1 := strconv.ParseFloat(strings.TrimSpace(d), 64)
	tv, err2 := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err1 != nil || err2 != nil || tv <= 0 || dv < 0 {
		return 0, 0
	}
	if dv > tv {
		dv = tv
	}
	return dv, tv
}
