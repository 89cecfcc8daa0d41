package scheduler

import (
	"fmt"
	"time"
)

// QuietSchedule is a schedule with one fire a period (an hour or a day, in UTC) whose fires are
// half a period away from now, for the tests that read their slots from time.Now and count on no
// fire while they run. "@every 1h" turned at 09:00:00 in one CI run, between a test's slots and a
// node's start: the node ran the new slot too, and the test counted one run too many. Exported to
// the package's external tests (package scheduler_test).
func QuietSchedule(period time.Duration) string {
	at := time.Now().UTC().Add(period / 2)
	switch period {
	case time.Hour:
		return fmt.Sprintf("%d * * * *", at.Minute())
	case 24 * time.Hour:
		return fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
	}
	panic("QuietSchedule: an hour or a day")
}
