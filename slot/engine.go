package slot

import (
	"math/bits"
	"time"
)

// horizon bounds every search for a fire time. The sparsest schedule the parser accepts is
// "0 0 29 2 *", which can go 8 years without firing (2096-02-29 to 2104-02-29).
const horizon = 10 * 366 * 24 * time.Hour

const (
	secondMask = 1<<60 - 1
	minuteMask = 1<<60 - 1
	hourMask   = 1<<24 - 1
	domMask    = 1<<32 - 2       // bits 1..31
	monthMask  = 1<<13 - 2       // bits 1..12
	dowMask    = 1<<7 - 1        // bits 0..6
	starBit    = uint64(1) << 63 // robfig marks a field written as "*" with this bit
)

// matcher decides which wall-clock seconds start a slot. It holds robfig's bit sets: bit i of
// second is set when second i matches, and so on; a 5-field schedule matches second 0 only.
// Every --per period is also a matcher (e.g. day is "0 0 0 * * *"), so periods and schedules
// share one search engine.
type matcher struct {
	second, minute, hour, dom, month, dow uint64
	// domStar/dowStar: the field was "*", so the day matches on both fields (AND), as in cron;
	// otherwise a day matches when either restricted field matches (OR).
	domStar, dowStar bool
	// repeats: fire at the second occurrence of a wall time that a fall-back repeats. True only
	// for schedules whose hour field covers every hour (like cron(8): only "wildcard" jobs run
	// again in the repeated hour; a 01:30 daily job does not run twice).
	repeats bool
}

func (m *matcher) dayOK(t time.Time) bool {
	if m.month&(1<<uint(t.Month())) == 0 {
		return false
	}
	d := m.dom&(1<<uint(t.Day())) != 0
	w := m.dow&(1<<uint(t.Weekday())) != 0
	if m.domStar || m.dowStar {
		return d && w
	}
	return d || w
}

// The search runs on naive wall-clock times: time.Time values in UTC whose fields are the
// local wall clock. A zone offset then maps wall to instant linearly within one zone segment.

func dayStart(t time.Time) time.Time {
	y, mo, d := t.Date()
	return time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
}

// latest returns the latest matching wall second in [lo, hi].
func (m *matcher) latest(lo, hi time.Time) (time.Time, bool) {
	w := hi.Truncate(time.Second)
	for !w.Before(lo) {
		y, mo, _ := w.Date()
		if m.month&(1<<uint(mo)) == 0 {
			w = time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		day := dayStart(w)
		if !m.dayOK(w) {
			w = day.Add(-time.Second)
			continue
		}
		hs := m.hour & hourMask & (uint64(2)<<uint(w.Hour()) - 1)
		if hs == 0 {
			w = day.Add(-time.Second)
			continue
		}
		h := time.Duration(63-bits.LeadingZeros64(hs)) * time.Hour
		if int(h/time.Hour) != w.Hour() {
			w = day.Add(h + time.Hour - time.Second)
			continue
		}
		ms := m.minute & minuteMask & (uint64(2)<<uint(w.Minute()) - 1)
		if ms == 0 {
			w = day.Add(h - time.Second)
			continue
		}
		mi := time.Duration(63-bits.LeadingZeros64(ms)) * time.Minute
		if int(mi/time.Minute) != w.Minute() {
			w = day.Add(h + mi + time.Minute - time.Second)
			continue
		}
		ss := m.second & secondMask & (uint64(2)<<uint(w.Second()) - 1)
		if ss == 0 {
			w = day.Add(h + mi - time.Second)
			continue
		}
		w = day.Add(h + mi + time.Duration(63-bits.LeadingZeros64(ss))*time.Second)
		if w.Before(lo) {
			return time.Time{}, false
		}
		return w, true
	}
	return time.Time{}, false
}

// earliest returns the earliest matching wall second in [lo, hi].
func (m *matcher) earliest(lo, hi time.Time) (time.Time, bool) {
	w := lo.Truncate(time.Second)
	if w.Before(lo) {
		w = w.Add(time.Second)
	}
	for !w.After(hi) {
		y, mo, _ := w.Date()
		if m.month&(1<<uint(mo)) == 0 {
			w = time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		day := dayStart(w)
		if !m.dayOK(w) {
			w = day.AddDate(0, 0, 1)
			continue
		}
		hs := m.hour & hourMask &^ (uint64(1)<<uint(w.Hour()) - 1)
		if hs == 0 {
			w = day.AddDate(0, 0, 1)
			continue
		}
		h := time.Duration(bits.TrailingZeros64(hs)) * time.Hour
		if int(h/time.Hour) != w.Hour() {
			w = day.Add(h)
			continue
		}
		ms := m.minute & minuteMask &^ (uint64(1)<<uint(w.Minute()) - 1)
		if ms == 0 {
			w = day.Add(h + time.Hour)
			continue
		}
		mi := time.Duration(bits.TrailingZeros64(ms)) * time.Minute
		if int(mi/time.Minute) != w.Minute() {
			w = day.Add(h + mi)
			continue
		}
		ss := m.second & secondMask &^ (uint64(1)<<uint(w.Second()) - 1)
		if ss == 0 {
			w = day.Add(h + mi + time.Minute)
			continue
		}
		w = day.Add(h + mi + time.Duration(bits.TrailingZeros64(ss))*time.Second)
		if w.After(hi) {
			return time.Time{}, false
		}
		return w, true
	}
	return time.Time{}, false
}

// segment is a stretch of time with one UTC offset. start/end are zero when unbounded.
type segment struct {
	start, end time.Time
	off        time.Duration
}

func segmentAt(t time.Time, loc *time.Location) segment {
	lt := t.In(loc)
	_, off := lt.Zone()
	s, e := lt.ZoneBounds()
	// Past the end of a zone's table, Go (1.26) can return bounds that do not contain t: for
	// Pacific/Chatham in the last day of 2108 the segment ends at 2108-12-31T00:00Z, a day
	// early, and the search would loop there. Clock changes happen on a quarter hour (UTC), so
	// the quarter hour around t has one offset: use it as the segment.
	const q = 15 * time.Minute
	if !e.IsZero() && !e.After(t) {
		e = t.Truncate(q).Add(q)
	}
	if !s.IsZero() && s.After(t) {
		s = t.Truncate(q)
	}
	return segment{start: s, end: e, off: time.Duration(off) * time.Second}
}

func offsetAt(t time.Time, loc *time.Location) time.Duration {
	_, off := t.In(loc).Zone()
	return time.Duration(off) * time.Second
}

// wall returns the naive wall clock of instant t under offset off.
func wall(t time.Time, off time.Duration) time.Time { return t.UTC().Add(off) }

// fire is one slot start: the matched wall time (which names --per periods) and its instant.
type fire struct {
	wall, at time.Time
}

// prev returns the latest fire at or before t.
//
// DST rules, applied per zone segment:
//   - a matching wall time inside a spring-forward gap fires at the first instant after the gap
//     (the transition); several gap times, and the wall time right after the gap, share that
//     instant, which is named by the latest of them;
//   - a matching wall time that a fall-back repeats fires at its first occurrence, and at its
//     second as well only when m.repeats.
func (m *matcher) prev(t time.Time, loc *time.Location) (fire, bool) {
	limit := t.Add(-horizon)
	x := t
	for !x.Before(limit) {
		sg := segmentAt(x, loc)
		lo := limit
		if !sg.start.IsZero() && sg.start.After(limit) {
			lo = sg.start
		}
		loW, hiW := wall(lo, sg.off), wall(x, sg.off)
		if !sg.start.IsZero() && !m.repeats {
			// Wall times [start+off, start+prevOff) were already shown before the fall-back.
			if pOff := offsetAt(sg.start.Add(-time.Nanosecond), loc); pOff > sg.off {
				if r := wall(sg.start, pOff); r.After(loW) {
					loW = r
				}
			}
		}
		if w, ok := m.latest(loW, hiW); ok {
			return fire{w, w.Add(-sg.off).In(loc)}, true
		}
		if sg.start.IsZero() || !sg.start.After(limit) {
			break
		}
		pOff := offsetAt(sg.start.Add(-time.Nanosecond), loc)
		if pOff < sg.off { // spring-forward gap just before this segment
			if w, ok := m.latest(wall(sg.start, pOff), wall(sg.start, sg.off).Add(-time.Nanosecond)); ok {
				return fire{w, sg.start.In(loc)}, true
			}
		}
		x = sg.start.Add(-time.Nanosecond)
	}
	return fire{}, false
}

// next returns the earliest fire strictly after t.
func (m *matcher) next(t time.Time, loc *time.Location) (fire, bool) {
	limit := t.Add(horizon)
	x := t
	first := true
	for !x.After(limit) {
		sg := segmentAt(x, loc)
		loW := wall(x, sg.off)
		if first {
			loW = loW.Add(time.Nanosecond)
		}
		hiW := wall(limit, sg.off)
		if !sg.end.IsZero() && sg.end.Before(limit) {
			hiW = wall(sg.end, sg.off).Add(-time.Nanosecond)
		}
		if !sg.start.IsZero() && !m.repeats {
			if pOff := offsetAt(sg.start.Add(-time.Nanosecond), loc); pOff > sg.off {
				if r := wall(sg.start, pOff); r.After(loW) {
					loW = r
				}
			}
		}
		if w, ok := m.earliest(loW, hiW); ok {
			return fire{w, w.Add(-sg.off).In(loc)}, true
		}
		if sg.end.IsZero() || sg.end.After(limit) {
			break
		}
		nOff := offsetAt(sg.end, loc)
		if nOff > sg.off { // spring-forward gap at sg.end
			gapLo, after := wall(sg.end, sg.off), wall(sg.end, nOff)
			if w, ok := m.latest(gapLo, after.Add(-time.Nanosecond)); ok {
				// Name the shared instant like prev does: the wall time right after the gap wins.
				if w2, ok := m.latest(after, after); ok {
					w = w2
				}
				return fire{w, sg.end.In(loc)}, true
			}
		}
		x = sg.end
		first = false
	}
	return fire{}, false
}

// fires reports whether the matcher matches any day at all. Every (month, day, weekday)
// combination, 29 February included, occurs in the 28 years 2001–2028.
func (m *matcher) fires() bool {
	if m.second&secondMask == 0 || m.minute&minuteMask == 0 || m.hour&hourMask == 0 {
		return false
	}
	for d := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2029; d = d.AddDate(0, 0, 1) {
		if m.dayOK(d) {
			return true
		}
	}
	return false
}
