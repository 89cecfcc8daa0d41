package slot

import (
	"testing"
	"time"
)

// DST cases. 2026 transitions: America/New_York springs forward on 8 March at 02:00 EST
// (07:00Z) and falls back on 1 November at 02:00 EDT (06:00Z); Europe/Berlin on 29 March at
// 02:00 CET (01:00Z) and 25 October at 03:00 CEST (01:00Z).
func TestDST(t *testing.T) {
	const ny, berlin = "America/New_York", "Europe/Berlin"
	for _, c := range []struct {
		name, per, sched, tz, at, value, start string
	}{
		// --per hour: the skipped hour has no slot; the repeated hour is one slot, 2h long.
		{"ny spring hour before", "hour", "", ny, "2026-03-08T06:59:59Z", "2026-03-08T01", "2026-03-08T06:00:00Z"},
		{"ny spring hour after", "hour", "", ny, "2026-03-08T07:00:00Z", "2026-03-08T03", "2026-03-08T07:00:00Z"},
		{"ny fall hour first", "hour", "", ny, "2026-11-01T05:30:00Z", "2026-11-01T01", "2026-11-01T05:00:00Z"},
		{"ny fall hour repeat", "hour", "", ny, "2026-11-01T06:30:00Z", "2026-11-01T01", "2026-11-01T05:00:00Z"},
		{"ny fall hour after", "hour", "", ny, "2026-11-01T07:00:00Z", "2026-11-01T02", "2026-11-01T07:00:00Z"},
		{"berlin spring hour before", "hour", "", berlin, "2026-03-29T00:59:59Z", "2026-03-29T01", "2026-03-29T00:00:00Z"},
		{"berlin spring hour after", "hour", "", berlin, "2026-03-29T01:00:00Z", "2026-03-29T03", "2026-03-29T01:00:00Z"},
		{"berlin fall hour first", "hour", "", berlin, "2026-10-25T00:30:00Z", "2026-10-25T02", "2026-10-25T00:00:00Z"},
		{"berlin fall hour repeat", "hour", "", berlin, "2026-10-25T01:30:00Z", "2026-10-25T02", "2026-10-25T00:00:00Z"},
		{"berlin fall hour after", "hour", "", berlin, "2026-10-25T02:00:00Z", "2026-10-25T03", "2026-10-25T02:00:00Z"},
		{"london fall minute first", "minute", "", "Europe/London", "2026-10-25T00:58:57Z", "2026-10-25T01:58", "2026-10-25T00:58:00Z"},
		{"london fall minute repeat", "minute", "", "Europe/London", "2026-10-25T01:58:57Z", "2026-10-25T01:59", "2026-10-25T00:59:00Z"}, // 01:59 lasts 61 minutes,
		{"berlin spring minute", "minute", "", berlin, "2026-03-29T01:00:30Z", "2026-03-29T03:00", "2026-03-29T01:00:00Z"},
		// --per day: 23h and 25h days.
		{"ny spring day", "day", "", ny, "2026-03-09T03:59:59Z", "2026-03-08", "2026-03-08T05:00:00Z"},
		{"ny spring next day", "day", "", ny, "2026-03-09T04:00:00Z", "2026-03-09", "2026-03-09T04:00:00Z"},
		{"ny fall day", "day", "", ny, "2026-11-02T04:59:59Z", "2026-11-01", "2026-11-01T04:00:00Z"},
		{"ny fall next day", "day", "", ny, "2026-11-02T05:00:00Z", "2026-11-02", "2026-11-02T05:00:00Z"},
		{"berlin spring day", "day", "", berlin, "2026-03-29T21:59:59Z", "2026-03-29", "2026-03-28T23:00:00Z"},
		{"berlin fall day", "day", "", berlin, "2026-10-25T22:59:59Z", "2026-10-25", "2026-10-24T22:00:00Z"},
		// A day whose midnight does not exist starts at the first instant that does.
		{"sao paulo 2018 day", "day", "", "America/Sao_Paulo", "2018-11-04T12:00:00Z", "2018-11-04", "2018-11-04T03:00:00Z"},
		{"sao paulo 2018 short day", "day", "", "America/Sao_Paulo", "2018-11-04T02:59:59Z", "2018-11-03", "2018-11-03T03:00:00Z"},
		{"sao paulo 2018 week", "week", "", "America/Sao_Paulo", "2018-11-04T12:00:00Z", "2018-W44", "2018-10-29T03:00:00Z"},
		{"beirut spring day", "day", "", "Asia/Beirut", "2026-03-29T12:00:00Z", "2026-03-29", "2026-03-28T22:00:00Z"},
		// Beirut falls back at 24:00 on Saturday to 23:00: the repeated hour is Saturday's.
		{"beirut fall day", "day", "", "Asia/Beirut", "2026-10-24T21:30:00Z", "2026-10-24", "2026-10-23T21:00:00Z"},
		{"beirut fall next day", "day", "", "Asia/Beirut", "2026-10-24T22:30:00Z", "2026-10-25", "2026-10-24T22:00:00Z"},
		{"beirut fall hour repeat", "hour", "", "Asia/Beirut", "2026-10-24T21:30:00Z", "2026-10-24T23", "2026-10-24T20:00:00Z"},
		{"beirut fall hour after", "hour", "", "Asia/Beirut", "2026-10-24T22:30:00Z", "2026-10-25T00", "2026-10-24T22:00:00Z"},
		// Samoa skipped 30 December 2011 entirely.
		{"apia skipped day", "day", "", "Pacific/Apia", "2011-12-30T10:00:00Z", "2011-12-31", "2011-12-30T10:00:00Z"},
		{"apia day before", "day", "", "Pacific/Apia", "2011-12-30T09:59:59Z", "2011-12-29", "2011-12-29T10:00:00Z"},

		// --schedule "30 2 * * *": on spring-forward day 02:30 does not exist; the job fires at
		// the first instant after the gap, 03:00 EDT, and that is the slot.
		{"ny spring 02:30 before", "", "30 2 * * *", ny, "2026-03-08T06:59:00Z", "2026-03-07T02:30:00-05:00", "2026-03-07T07:30:00Z"},
		{"ny spring 02:30", "", "30 2 * * *", ny, "2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"ny spring 02:30 later", "", "30 2 * * *", ny, "2026-03-09T06:29:59Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"ny spring 02:30 next day", "", "30 2 * * *", ny, "2026-03-09T06:30:00Z", "2026-03-09T02:30:00-04:00", "2026-03-09T06:30:00Z"},
		{"berlin spring 02:30", "", "30 2 * * *", berlin, "2026-03-29T01:10:00Z", "2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00Z"},
		{"ny spring */15 2", "", "*/15 2 * * *", ny, "2026-03-08T07:59:00Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		// A fixed-time job in a repeated hour fires once, at the first occurrence.
		{"ny fall 01:30 repeat", "", "30 1 * * *", ny, "2026-11-01T06:45:00Z", "2026-11-01T01:30:00-04:00", "2026-11-01T05:30:00Z"},
		{"berlin fall 02:30 repeat", "", "30 2 * * *", berlin, "2026-10-25T01:45:00Z", "2026-10-25T02:30:00+02:00", "2026-10-25T00:30:00Z"},
		// "0 * * * *" fires in both 01:00 hours; the offsets tell the two slots apart.
		{"ny fall hourly first", "", "0 * * * *", ny, "2026-11-01T05:59:59Z", "2026-11-01T01:00:00-04:00", "2026-11-01T05:00:00Z"},
		{"ny fall hourly repeat", "", "0 * * * *", ny, "2026-11-01T06:00:00Z", "2026-11-01T01:00:00-05:00", "2026-11-01T06:00:00Z"},
		{"ny fall hourly after", "", "0 * * * *", ny, "2026-11-01T07:00:00Z", "2026-11-01T02:00:00-05:00", "2026-11-01T07:00:00Z"},
		{"berlin fall hourly repeat", "", "@hourly", berlin, "2026-10-25T01:59:00Z", "2026-10-25T02:00:00+01:00", "2026-10-25T01:00:00Z"},
		{"berlin fall 02:30 every hour", "", "30 * * * *", berlin, "2026-10-25T01:45:00Z", "2026-10-25T02:30:00+01:00", "2026-10-25T01:30:00Z"},
		{"ny spring hourly", "", "0 * * * *", ny, "2026-03-08T07:30:00Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"sao paulo 2018 @daily", "", "@daily", "America/Sao_Paulo", "2018-11-04T12:00:00Z", "2018-11-04T01:00:00-02:00", "2018-11-04T03:00:00Z"},
		{"lord howe half-hour fall", "", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T15:10:00Z", "2026-04-05T01:45:00+11:00", "2026-04-04T14:45:00Z"},

		// A seconds field follows the same rules: gap times fire at the first instant after the
		// gap, and a repeated wall time fires again only when the hour field is "*".
		{"ny spring */2s before", "", "*/2 * * * * *", ny, "2026-03-08T06:59:59Z", "2026-03-08T01:59:58-05:00", "2026-03-08T06:59:58Z"},
		{"ny spring */2s after", "", "*/2 * * * * *", ny, "2026-03-08T07:00:01Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"ny spring 02:30:30", "", "30 30 2 * * *", ny, "2026-03-08T07:00:05Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"ny spring 02:30:30 next day", "", "30 30 2 * * *", ny, "2026-03-09T06:30:30Z", "2026-03-09T02:30:30-04:00", "2026-03-09T06:30:30Z"},
		{"ny fall */2s first", "", "*/2 * * * * *", ny, "2026-11-01T05:59:59Z", "2026-11-01T01:59:58-04:00", "2026-11-01T05:59:58Z"},
		{"ny fall */2s repeat", "", "*/2 * * * * *", ny, "2026-11-01T06:00:01Z", "2026-11-01T01:00:00-05:00", "2026-11-01T06:00:00Z"},
		{"ny fall 01:30:30 repeat", "", "30 30 1 * * *", ny, "2026-11-01T06:45:00Z", "2026-11-01T01:30:30-04:00", "2026-11-01T05:30:30Z"},
		{"ny fall fixed hour every minute", "", "15 * 1 * * *", ny, "2026-11-01T06:30:20Z", "2026-11-01T01:59:15-04:00", "2026-11-01T05:59:15Z"},
		{"berlin spring */2s before", "", "*/2 * * * * *", berlin, "2026-03-29T00:59:59Z", "2026-03-29T01:59:58+01:00", "2026-03-29T00:59:58Z"},
		{"berlin spring */2s after", "", "*/2 * * * * *", berlin, "2026-03-29T01:00:01Z", "2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00Z"},
		{"berlin spring 02:30:45", "", "45 30 2 * * *", berlin, "2026-03-29T01:10:00Z", "2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00Z"},
		{"berlin fall */2s first", "", "*/2 * * * * *", berlin, "2026-10-25T00:59:59Z", "2026-10-25T02:59:58+02:00", "2026-10-25T00:59:58Z"},
		{"berlin fall */2s repeat", "", "*/2 * * * * *", berlin, "2026-10-25T01:00:01Z", "2026-10-25T02:00:00+01:00", "2026-10-25T01:00:00Z"},
		{"berlin fall 02:30:45 repeat", "", "45 30 2 * * *", berlin, "2026-10-25T01:45:00Z", "2026-10-25T02:30:45+02:00", "2026-10-25T00:30:45Z"},
		// @every D ignores clock changes: fixed intervals from the Unix epoch; only the offset shown changes.
		{"ny fall @every 1h repeat", "", "@every 1h", ny, "2026-11-01T06:30:00Z", "2026-11-01T01:00:00-05:00", "2026-11-01T06:00:00Z"},
		{"ny spring @every 1h", "", "@every 1h", ny, "2026-03-08T07:30:00Z", "2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"},
		{"berlin spring @every 90m", "", "@every 90m", berlin, "2026-03-29T01:10:00Z", "2026-03-29T01:00:00+01:00", "2026-03-29T00:00:00Z"},
		{"berlin spring @every 90m after", "", "@every 90m", berlin, "2026-03-29T01:40:00Z", "2026-03-29T03:30:00+02:00", "2026-03-29T01:30:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkSlot(t, mustNew(t, c.per, c.sched, "", c.tz), c.at, c.value, c.start)
		})
	}
}

// TestNextAcrossDST lists consecutive slots through transitions.
func TestNextAcrossDST(t *testing.T) {
	for _, c := range []struct {
		per, sched, tz, from string
		want                 []string
	}{
		{"", "0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", []string{
			"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", []string{
			"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", []string{
			"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"", "*/30 * * * *", "America/New_York", "2026-03-08T06:10:00Z", []string{
			"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"}},
		{"hour", "", "America/New_York", "2026-03-08T05:10:00Z", []string{
			"2026-03-08T01", "2026-03-08T03", "2026-03-08T04"}},
		{"hour", "", "America/New_York", "2026-11-01T04:10:00Z", []string{
			"2026-11-01T01", "2026-11-01T02", "2026-11-01T03"}},
		{"day", "", "Pacific/Apia", "2011-12-28T12:00:00Z", []string{"2011-12-29", "2011-12-31", "2012-01-01"}},
		{"day", "", "Asia/Beirut", "2026-10-24T12:00:00Z", []string{"2026-10-25", "2026-10-26"}},
		{"", "*/20 * * * * *", "America/New_York", "2026-11-01T05:59:30Z", []string{
			"2026-11-01T01:59:40-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:00:20-05:00"}},
		{"", "*/20 * * * * *", "Europe/Berlin", "2026-03-29T00:59:30Z", []string{
			"2026-03-29T01:59:40+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:00:20+02:00"}},
		{"", "0 30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", []string{
			"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"", "@every 30m", "America/New_York", "2026-11-01T05:10:00Z", []string{
			"2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"", "@every 40m", "Europe/Berlin", "2026-03-29T00:00:00Z", []string{
			"2026-03-29T01:40:00+01:00", "2026-03-29T03:20:00+02:00", "2026-03-29T04:00:00+02:00"}},
		{"", "@hourly", "Asia/Beirut", "2026-10-24T19:30:00Z", []string{
			"2026-10-24T23:00:00+03:00", "2026-10-24T23:00:00+02:00", "2026-10-25T00:00:00+02:00"}},
	} {
		s := mustNew(t, c.per, c.sched, "", c.tz)
		x := rfc(t, c.from)
		for _, want := range c.want {
			n := s.Next(x)
			if n.Value != want {
				t.Errorf("%s: Next(%s) = %q, want %q", s, x.Format(time.RFC3339), n.Value, want)
				break
			}
			checkRoundTrip(t, s, n.Start)
			x = n.Start
		}
	}
}

// TestRobfigDST documents why fire times are computed here rather than by robfig's Next.
func TestRobfigDST(t *testing.T) {
	s := mustNew(t, "", "30 2 * * *", "", "America/New_York")
	rs := robfigNext(t, "30 2 * * *", "America/New_York", rfc(t, "2026-03-07T12:00:00Z"))
	if rs == "2026-03-08T03:00:00-04:00" {
		t.Log("robfig now fires a skipped 02:30 after the gap; our own engine agrees")
	} else if rs != "2026-03-09T02:30:00-04:00" {
		t.Errorf("robfig Next = %s", rs)
	}
	if got := s.Next(rfc(t, "2026-03-07T12:00:00Z")).Value; got != "2026-03-08T03:00:00-04:00" {
		t.Errorf("Next = %s", got)
	}
}

// TestAroundEveryTransition checks the round-trip invariants near every zone transition from
// 2010 to 2030 in zones with odd DST histories (midnight gaps, 30-minute shifts, skipped days).
func TestAroundEveryTransition(t *testing.T) {
	deltas := []time.Duration{-25 * time.Hour, -time.Hour - time.Second, -time.Hour, -30 * time.Minute, -time.Minute,
		-time.Second, 0, time.Second, time.Minute, 29 * time.Minute, 30 * time.Minute, 59 * time.Minute,
		time.Hour, 90 * time.Minute, 2 * time.Hour, 25 * time.Hour}
	if testing.Short() {
		deltas = []time.Duration{-time.Second, 0, 30 * time.Minute, time.Hour}
	}
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, z := range fuzzZones {
		loc := mustLoad(t, z)
		for x := time.Date(2010, 1, 1, 0, 0, 0, 0, loc); x.Before(end); {
			_, e := x.ZoneBounds()
			if e.IsZero() || e.After(end) {
				break
			}
			for _, sp := range fuzzSpecs {
				s := mustNew(t, sp.per, sp.sched, "", z)
				for _, d := range deltas {
					checkRoundTrip(t, s, e.Add(d))
				}
			}
			x = e
		}
	}
}

// TestPastZoneTable: Go's ZoneBounds returns a segment that ends before t for the last day of
// a leap year past the zone's table (2040-12-31 in New York ends at 00:00Z); the searches must
// not loop there, and the invariants hold across it.
func TestPastZoneTable(t *testing.T) {
	for _, day := range []string{"2040-12-30T12:00:00Z", "2040-12-31T00:00:00Z", "2040-12-31T13:30:00Z", "2108-12-31T12:00:00Z"} {
		x := rfc(t, day)
		for _, z := range fuzzZones {
			for _, sp := range fuzzSpecs {
				s := mustNew(t, sp.per, sp.sched, "", z)
				for _, d := range []time.Duration{0, 6 * time.Hour, 12 * time.Hour, 18 * time.Hour} {
					checkRoundTrip(t, s, x.Add(d))
				}
			}
		}
	}
	// The hang FuzzParse found: a value in Pacific/Chatham whose search crosses 2108-12-31.
	s := mustNew(t, "", "0 0 29 2 *", "", "Pacific/Chatham")
	if _, err := s.Parse("2108-11-29T1:58:00+00:00"); err == nil {
		t.Error("Parse accepted a time that is not a fire time")
	}
	if n := s.Next(rfc(t, "2108-11-29T01:58:00Z")); n.Value != "2112-02-29T00:00:00+13:45" {
		t.Errorf("Next = %+v", n)
	}
}
