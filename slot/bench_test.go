package slot

import (
	"testing"
	"time"
)

func BenchmarkAt(b *testing.B) {
	t := time.Date(2026, 11, 29, 2, 3, 4, 0, time.UTC)
	for _, c := range []struct{ name, per, sched string }{
		{"per-minute", "minute", ""}, {"per-week", "week", ""}, {"daily", "", "0 2 * * *"},
		{"feb29", "", "0 0 29 2 *"}, {"weekday-quarter", "", "*/15 9-17 * * mon-fri"},
	} {
		s := mustNew(b, c.per, c.sched, "", "Europe/Berlin")
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = s.At(t)
			}
		})
	}
}

// BenchmarkNext: the daemon asks for the next fire time of every job; seconds schedules and
// @every must stay as cheap as minute ones.
func BenchmarkNext(b *testing.B) {
	t := time.Date(2026, 11, 29, 2, 3, 4, 0, time.UTC)
	for _, c := range []struct{ name, sched string }{
		{"daily", "0 2 * * *"}, {"every-2s", "*/2 * * * * *"}, {"daily-02:00:30", "30 0 2 * * *"},
		{"weekday-quarter-15s", "15 */15 9-17 * * mon-fri"}, {"@every-7m", "@every 7m"}, {"@every-2s", "@every 2s"},
	} {
		s := mustNew(b, "", c.sched, "", "Europe/Berlin")
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = s.Next(t)
			}
		})
	}
}
