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
