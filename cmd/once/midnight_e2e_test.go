package main

import (
	"testing"
	"time"
)

// dayTurnMargin is how near a midnight awayFromMidnight waits it out: longer than the part of any
// test that calls it which must see one day (a burst of 200 launches, on a loaded machine).
const dayTurnMargin = 2 * time.Minute

// awayFromMidnight waits out the next midnight, in UTC or in the local zone (--per day's default),
// when it is under dayTurnMargin away. A test that runs --per day (or a --catch-up of days) twice
// and counts on one slot, or reads today's slot from time.Now and compares it with the one once
// read from its own clock, saw two days when the date turned while it ran, as the scheduler's
// tests saw two hours at 09:00:00 in CI (scheduler.QuietSchedule). Call it after t.Parallel, just
// before the runs that must share a day: it waits at most once a day.
func awayFromMidnight(t *testing.T) {
	t.Helper()
	for _, loc := range []*time.Location{time.UTC, time.Local} {
		now := time.Now().In(loc)
		next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
		if left := next.Sub(now); left < dayTurnMargin {
			t.Logf("waiting %s for midnight (%s) to pass: the test reads today's slot", left.Round(time.Millisecond), loc)
			time.Sleep(left + 100*time.Millisecond)
		}
	}
}
