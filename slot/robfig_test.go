package slot

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// robfigNext is robfig/cron's own next fire time, kept for comparison: v3.0.1 skips a 02:30
// job entirely on spring-forward day (it jumps to the next day) and fires a 01:30 job twice on
// fall-back day.
func robfigNext(t *testing.T, spec, tz string, from time.Time) string {
	t.Helper()
	s, err := cron.ParseStandard("CRON_TZ=" + tz + " " + spec)
	if err != nil {
		t.Fatal(err)
	}
	return s.Next(from).In(mustLoad(t, tz)).Format(scheduleLayout)
}

// TestAgreesWithRobfigOffDST checks the engine against robfig/cron on ordinary days, where
// robfig is right: for each schedule, the first 300 fires from several points in UTC and in
// Asia/Tokyo (no DST) must be the same instants.
func TestAgreesWithRobfigOffDST(t *testing.T) {
	for _, spec := range []string{
		"* * * * *", "*/7 * * * *", "0 * * * *", "5 4 * * *", "0 0 1 * *", "0 0 * * 0", "0 0 13 * 5",
		"15 10 * * mon-fri", "0 0 29 2 *", "59 23 31 12 *", "0 12 1,15 */2 *", "@weekly", "@monthly", "@yearly",
		"0 0 * * 1-5", "30 2 ? * ?", "0-10/3 1-3 * * *",
		"*/2 * * * * *", "30 0 2 * * *", "15-20 */7 * * * *", "0 0 0 29 2 *", "59 59 23 * * sun",
	} {
		for _, tz := range []string{"UTC", "Asia/Tokyo"} {
			s := mustNew(t, "", spec, "", tz)
			rs, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse("CRON_TZ=" + tz + " " + spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, from := range []string{"2026-11-29T02:03:04Z", "2023-12-31T23:59:00Z", "2028-02-28T15:00:00Z"} {
				x, y := rfc(t, from), rfc(t, from)
				for i := 0; i < 300; i++ {
					n := s.Next(x)
					want := rs.Next(y)
					if want.IsZero() { // robfig gives up after 5 years (29 February around 2100)
						break
					}
					if !n.Start.Equal(want) {
						t.Fatalf("%q in %s: Next(%s) = %s, robfig %s", spec, tz, x, n.Start, want)
					}
					if st, _ := s.Start(want.Add(time.Second - time.Nanosecond)); !st.Equal(want) {
						t.Fatalf("%q in %s: Start(%s) = %s", spec, tz, want.Add(time.Second-time.Nanosecond), st)
					}
					x, y = n.Start, want
				}
			}
		}
	}
}
