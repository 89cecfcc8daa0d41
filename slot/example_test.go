package slot_test

import (
	"fmt"
	"time"

	"github.com/once-run/once/slot"
)

func ExampleNew() {
	now := time.Date(2026, 11, 28, 18, 3, 0, 0, time.UTC) // 02:03 on 29 November in Shanghai

	for _, f := range []struct{ per, schedule string }{
		{"day", ""}, {"hour", ""}, {"minute", ""}, {"week", ""}, {"month", ""}, {"", "0 2 * * *"},
	} {
		s, err := slot.New(f.per, f.schedule, "", "Asia/Shanghai")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-38s %s\n", s, s.At(now))
	}

	_, err := slot.New("day", "@daily", "", "")
	fmt.Println(err)
	_, err = slot.New("", "", "", "Mars/Base")
	fmt.Println(err)
	// Output:
	// per day in Asia/Shanghai               2026-11-29
	// per hour in Asia/Shanghai              2026-11-29T02
	// per minute in Asia/Shanghai            2026-11-29T02:03
	// per week in Asia/Shanghai              2026-W48
	// per month in Asia/Shanghai             2026-11
	// schedule "0 2 * * *" in Asia/Shanghai  2026-11-29T02:00:00+08:00
	// --per and --schedule are mutually exclusive: give only one of them
	// --tz "Mars/Base": unknown time zone; use an IANA name such as Europe/Berlin
}

func ExampleSpec_Range() {
	s, _ := slot.New("", "30 2 * * *", "", "America/New_York")
	from := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
	slots, _ := s.Range(from, from.Add(72*time.Hour), 10)
	for _, sl := range slots {
		fmt.Println(sl.Value) // 02:30 does not exist on 8 March: that day's slot is 03:00
	}
	// Output:
	// 2026-03-07T02:30:00-05:00
	// 2026-03-08T03:00:00-04:00
	// 2026-03-09T02:30:00-04:00
}

// Sub-minute schedules: a leading seconds field, or @every D with slots anchored at the Unix
// epoch, so every host computes the same slots whatever its zone and start time.
func ExampleNew_seconds() {
	now := time.Date(2026, 11, 29, 2, 3, 5, 0, time.UTC)
	for _, sched := range []string{"*/2 * * * * *", "30 0 2 * * *", "@every 7m", "@every 24h"} {
		s, err := slot.New("", sched, "", "Asia/Shanghai")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-42s %s  next %s\n", s, s.At(now), s.Next(now).Value)
	}
	_, err := slot.New("", "@every 1500ms", "", "UTC")
	fmt.Println(err)
	// Output:
	// schedule "*/2 * * * * *" in Asia/Shanghai  2026-11-29T10:03:04+08:00  next 2026-11-29T10:03:06+08:00
	// schedule "30 0 2 * * *" in Asia/Shanghai   2026-11-29T02:00:30+08:00  next 2026-11-30T02:00:30+08:00
	// schedule "@every 7m" in Asia/Shanghai      2026-11-29T09:58:00+08:00  next 2026-11-29T10:05:00+08:00
	// schedule "@every 24h" in Asia/Shanghai     2026-11-29T08:00:00+08:00  next 2026-11-30T08:00:00+08:00
	// --schedule "@every 1500ms": the interval must be whole seconds; want @every D with D a duration of whole seconds from 1s to 24h, such as 30s, 5m or 1h30m
}
