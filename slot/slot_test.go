package slot

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustNew(t testing.TB, per, schedule, explicit, tz string) Spec {
	t.Helper()
	s, err := New(per, schedule, explicit, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rfc(t testing.TB, v string) time.Time {
	t.Helper()
	x, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// checkSlot asserts At and Start for t, and the round trips Parse(At(t)) == Start(t) and
// Start(t) <= t < Next(t).Start.
func checkSlot(t *testing.T, s Spec, at, wantValue, wantStart string) {
	t.Helper()
	x := rfc(t, at)
	if got := s.At(x); got != wantValue {
		t.Errorf("%s: At(%s) = %q, want %q", s, at, got, wantValue)
	}
	st, err := s.Start(x)
	if err != nil {
		t.Fatalf("%s: Start(%s): %v", s, at, err)
	}
	if want := rfc(t, wantStart); !st.Equal(want) {
		t.Errorf("%s: Start(%s) = %s, want %s", s, at, st.Format(time.RFC3339), wantStart)
	}
	checkRoundTrip(t, s, x)
}

func checkRoundTrip(t *testing.T, s Spec, x time.Time) {
	t.Helper()
	st, err := s.Start(x)
	if err != nil {
		t.Fatalf("%s: Start(%s): %v", s, x, err)
	}
	v := s.At(x)
	p, err := s.Parse(v)
	if err != nil {
		t.Fatalf("%s: Parse(At(%s) = %q): %v", s, x.Format(time.RFC3339), v, err)
	}
	if !p.Equal(st) {
		t.Errorf("%s: Parse(%q) = %s, want Start = %s", s, v, p.Format(time.RFC3339), st.Format(time.RFC3339))
	}
	if st.After(x) {
		t.Errorf("%s: Start(%s) = %s is after t", s, x.Format(time.RFC3339), st.Format(time.RFC3339))
	}
	if s.At(st) != v {
		t.Errorf("%s: At(Start) = %q, want %q", s, s.At(st), v)
	}
	n := s.Next(x)
	if !n.Start.After(x) || n.Value == v || n.Value != s.At(n.Start) {
		t.Errorf("%s: Next(%s) = %+v after slot %q", s, x.Format(time.RFC3339), n, v)
	}
	if before := s.At(n.Start.Add(-time.Nanosecond)); before != v {
		t.Errorf("%s: just before Next(%s).Start the slot is %q, want %q", s, x.Format(time.RFC3339), before, v)
	}
}

func TestPeriodBoundaries(t *testing.T) {
	for _, c := range []struct {
		per, tz, at, value, start string
	}{
		{"day", "UTC", "2026-11-29T00:00:00Z", "2026-11-29", "2026-11-29T00:00:00Z"},
		{"day", "UTC", "2026-11-29T23:59:59.999999999Z", "2026-11-29", "2026-11-29T00:00:00Z"},
		{"day", "UTC", "2026-11-28T23:59:59Z", "2026-11-28", "2026-11-28T00:00:00Z"},
		{"day", "Asia/Shanghai", "2026-11-28T16:00:00Z", "2026-11-29", "2026-11-29T00:00:00+08:00"},
		{"day", "Asia/Shanghai", "2026-11-28T15:59:59Z", "2026-11-28", "2026-11-28T00:00:00+08:00"},
		{"hour", "UTC", "2026-11-29T02:00:00Z", "2026-11-29T02", "2026-11-29T02:00:00Z"},
		{"hour", "UTC", "2026-11-29T02:59:59Z", "2026-11-29T02", "2026-11-29T02:00:00Z"},
		{"hour", "Asia/Kolkata", "2026-11-29T02:29:59Z", "2026-11-29T07", "2026-11-29T07:00:00+05:30"},
		{"hour", "Asia/Kolkata", "2026-11-29T02:30:00Z", "2026-11-29T08", "2026-11-29T08:00:00+05:30"},
		{"minute", "UTC", "2026-11-29T02:05:00Z", "2026-11-29T02:05", "2026-11-29T02:05:00Z"},
		{"minute", "UTC", "2026-11-29T02:05:59.9Z", "2026-11-29T02:05", "2026-11-29T02:05:00Z"},
		{"minute", "UTC", "2026-12-31T23:59:30Z", "2026-12-31T23:59", "2026-12-31T23:59:00Z"},
		{"month", "UTC", "2026-11-01T00:00:00Z", "2026-11", "2026-11-01T00:00:00Z"},
		{"month", "UTC", "2026-10-31T23:59:59Z", "2026-10", "2026-10-01T00:00:00Z"},
		{"month", "UTC", "2024-02-29T12:00:00Z", "2024-02", "2024-02-01T00:00:00Z"},
		{"month", "UTC", "2026-12-31T23:59:59Z", "2026-12", "2026-12-01T00:00:00Z"},
		{"month", "Europe/Berlin", "2026-10-31T23:30:00Z", "2026-11", "2026-11-01T00:00:00+01:00"},
		{"week", "UTC", "2026-11-23T00:00:00Z", "2026-W48", "2026-11-23T00:00:00Z"},
		{"week", "UTC", "2026-11-29T23:59:59Z", "2026-W48", "2026-11-23T00:00:00Z"},
		{"week", "UTC", "2026-11-22T23:59:59Z", "2026-W47", "2026-11-16T00:00:00Z"},
		// ISO weeks at year ends.
		{"week", "UTC", "2020-12-31T12:00:00Z", "2020-W53", "2020-12-28T00:00:00Z"},
		{"week", "UTC", "2021-01-03T23:59:59Z", "2020-W53", "2020-12-28T00:00:00Z"},
		{"week", "UTC", "2021-01-04T00:00:00Z", "2021-W01", "2021-01-04T00:00:00Z"},
		{"week", "UTC", "2025-12-29T00:00:00Z", "2026-W01", "2025-12-29T00:00:00Z"},
		{"week", "UTC", "2026-01-01T00:00:00Z", "2026-W01", "2025-12-29T00:00:00Z"},
		{"week", "UTC", "2025-12-28T23:59:59Z", "2025-W52", "2025-12-22T00:00:00Z"},
		{"week", "UTC", "2026-12-31T00:00:00Z", "2026-W53", "2026-12-28T00:00:00Z"},
		{"week", "UTC", "2027-01-03T00:00:00Z", "2026-W53", "2026-12-28T00:00:00Z"},
		{"week", "UTC", "2027-01-04T00:00:00Z", "2027-W01", "2027-01-04T00:00:00Z"},
		{"week", "UTC", "2015-12-31T00:00:00Z", "2015-W53", "2015-12-28T00:00:00Z"},
		{"week", "UTC", "2019-12-30T00:00:00Z", "2020-W01", "2019-12-30T00:00:00Z"},
	} {
		checkSlot(t, mustNew(t, c.per, "", "", c.tz), c.at, c.value, c.start)
	}
}

func TestSundaySeven(t *testing.T) {
	for in, want := range map[string]string{
		"0 2 * * 7":           "0 2 * * 0",
		"0 2 * * 5-7":         "0 2 * * 5,6,0",
		"0 2 * * 0-7":         "0 2 * * 0,1,2,3,4,5,6,0",
		"0 2 * * 1-7/3":       "0 2 * * 1,4,0",
		"0 2 * * 7/2":         "0 2 * * 0",
		"0 2 * * mon,7":       "0 2 * * mon,0",
		"0 0 2 * * 7":         "0 0 2 * * 0",
		"0 2 * * 1-5":         "0 2 * * 1-5", // no 7: left as written
		"0 2 * * sun-sat":     "0 2 * * sun-sat",
		"0 2 * * 6-8":         "0 2 * * 6-8", // robfig refuses the 8
		"0 2 * * 07":          "0 2 * * 07",
		"0 2 7 * *":           "0 2 7 * *", // the 7th of the month
		"@weekly":             "@weekly",
		"0 2 * * 7 extra x y": "0 2 * * 7 extra x y",
	} {
		if got := sundaySeven(in); got != want {
			t.Errorf("sundaySeven(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSchedule(t *testing.T) {
	for _, c := range []struct {
		sched, tz, at, value, start string
	}{
		{"0 2 * * *", "Asia/Shanghai", "2026-11-29T02:03:00+08:00", "2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00+08:00"},
		{"0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00+08:00"},
		{"0 2 * * *", "Asia/Shanghai", "2026-11-29T01:59:59+08:00", "2026-11-28T02:00:00+08:00", "2026-11-28T02:00:00+08:00"},
		// UTC and zero offsets are written +00:00, never Z.
		{"0 2 * * *", "UTC", "2026-11-29T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"0 2 * * *", "Europe/London", "2026-11-29T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"0 2 * * *", "Europe/London", "2026-07-29T05:00:00Z", "2026-07-29T02:00:00+01:00", "2026-07-29T01:00:00Z"},
		{"*/15 9-17 * * mon-fri", "UTC", "2026-11-27T17:50:00Z", "2026-11-27T17:45:00+00:00", "2026-11-27T17:45:00Z"},
		{"*/15 9-17 * * mon-fri", "UTC", "2026-11-30T08:59:00Z", "2026-11-27T17:45:00+00:00", "2026-11-27T17:45:00Z"},
		{"@yearly", "UTC", "2026-11-29T00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00Z"},
		{"@annually", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00Z"},
		{"@monthly", "UTC", "2026-11-29T00:00:00Z", "2026-11-01T00:00:00+00:00", "2026-11-01T00:00:00Z"},
		{"@weekly", "UTC", "2026-11-29T00:00:00Z", "2026-11-29T00:00:00+00:00", "2026-11-29T00:00:00Z"}, // Sunday
		// 7 is Sunday too, as crontab(5) has it (2026-11-29 is a Sunday, 2026-11-30 a Monday).
		{"0 2 * * 7", "UTC", "2026-11-30T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"0 2 * * 5-7", "UTC", "2026-11-30T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"0 2 * * 1-7/3", "UTC", "2026-11-28T05:00:00Z", "2026-11-26T02:00:00+00:00", "2026-11-26T02:00:00Z"},
		{"0 2 * * 1,7", "UTC", "2026-11-29T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"0 0 2 * * 7/7", "UTC", "2026-11-30T05:00:00Z", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"@weekly", "UTC", "2026-11-28T23:00:00Z", "2026-11-22T00:00:00+00:00", "2026-11-22T00:00:00Z"},
		{"@daily", "UTC", "2026-11-29T12:00:00Z", "2026-11-29T00:00:00+00:00", "2026-11-29T00:00:00Z"},
		{"@midnight", "UTC", "2026-11-29T12:00:00Z", "2026-11-29T00:00:00+00:00", "2026-11-29T00:00:00Z"},
		{"@hourly", "UTC", "2026-11-29T12:34:00Z", "2026-11-29T12:00:00+00:00", "2026-11-29T12:00:00Z"},
		// Day-of-month and day-of-week both restricted: either matches (cron's OR rule).
		{"0 0 13 * 5", "UTC", "2026-11-14T00:00:00Z", "2026-11-13T00:00:00+00:00", "2026-11-13T00:00:00Z"},
		{"0 0 13 * 5", "UTC", "2026-11-12T00:00:00Z", "2026-11-06T00:00:00+00:00", "2026-11-06T00:00:00Z"},
		// Sparse: 29 February, 8 years apart around 2100.
		{"0 0 29 2 *", "UTC", "2026-11-29T00:00:00Z", "2024-02-29T00:00:00+00:00", "2024-02-29T00:00:00Z"},
		{"0 0 29 2 *", "UTC", "2103-12-31T00:00:00Z", "2096-02-29T00:00:00+00:00", "2096-02-29T00:00:00Z"},
		// A leading seconds field.
		{"*/2 * * * * *", "UTC", "2026-11-29T02:03:05.5Z", "2026-11-29T02:03:04+00:00", "2026-11-29T02:03:04Z"},
		{"*/2 * * * * *", "UTC", "2026-11-29T02:03:04Z", "2026-11-29T02:03:04+00:00", "2026-11-29T02:03:04Z"},
		{"*/2 * * * * *", "Asia/Kolkata", "2026-11-29T00:00:00Z", "2026-11-29T05:30:00+05:30", "2026-11-29T00:00:00Z"},
		{"30 0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:29+08:00", "2026-11-28T02:00:30+08:00", "2026-11-28T02:00:30+08:00"},
		{"30 0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:30+08:00", "2026-11-29T02:00:30+08:00", "2026-11-29T02:00:30+08:00"},
		{"0 0 2 * * *", "Asia/Shanghai", "2026-11-29T02:03:00+08:00", "2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00+08:00"},
		{"10,50 59 23 31 12 *", "UTC", "2027-01-01T00:00:00Z", "2026-12-31T23:59:50+00:00", "2026-12-31T23:59:50Z"},
		{"15-20 */30 9 * * mon", "UTC", "2026-11-30T09:30:45Z", "2026-11-30T09:30:20+00:00", "2026-11-30T09:30:20Z"},
		// @every D: fixed slots anchored at the Unix epoch, whatever the zone (1795917784 = 02:03:04Z).
		{"@every 7m", "UTC", "2026-11-29T02:03:04Z", "2026-11-29T01:58:00+00:00", "2026-11-29T01:58:00Z"},
		{"@every 7m", "Asia/Kolkata", "2026-11-29T02:03:04Z", "2026-11-29T07:28:00+05:30", "2026-11-29T01:58:00Z"},
		{"@every 45m", "America/New_York", "2026-11-29T02:03:04Z", "2026-11-28T20:30:00-05:00", "2026-11-29T01:30:00Z"},
		{"@every 24h", "Asia/Shanghai", "2026-11-29T02:03:04Z", "2026-11-29T08:00:00+08:00", "2026-11-29T00:00:00Z"},
		{"@every 23h59m59s", "UTC", "2026-11-29T02:03:04Z", "2026-11-28T18:13:34+00:00", "2026-11-28T18:13:34Z"},
		{"@every 1s", "UTC", "2026-11-29T02:03:04.999Z", "2026-11-29T02:03:04+00:00", "2026-11-29T02:03:04Z"},
		{"@every 10s", "UTC", "1969-12-31T23:59:55Z", "1969-12-31T23:59:50+00:00", "1969-12-31T23:59:50Z"},
	} {
		checkSlot(t, mustNew(t, "", c.sched, "", c.tz), c.at, c.value, c.start)
	}
}

func TestExplicitAndNone(t *testing.T) {
	s := mustNew(t, "", "", "batch-7", "UTC")
	if s.Kind() != "slot" || s.IsZero() || s.At(time.Now()) != "batch-7" || s.String() != `slot "batch-7"` {
		t.Errorf("explicit: %q %v %q %q", s.Kind(), s.IsZero(), s.At(time.Now()), s)
	}
	var z Spec
	z2 := mustNew(t, "", "", "", "")
	for _, s := range []Spec{s, z, z2} {
		if _, err := s.Start(time.Now()); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Start: %v", s, err)
		}
		if _, err := s.Parse("x"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse: %v", s, err)
		}
		if _, err := s.Range(time.Now(), time.Now(), 10); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Range: %v", s, err)
		}
		if n := s.Next(time.Now()); n != (Slot{}) {
			t.Errorf("%s: Next = %+v", s, n)
		}
	}
	for _, s := range []Spec{z, z2} {
		if !s.IsZero() || s.Kind() != "" || s.At(time.Now()) != "" || s.String() != "no slot" {
			t.Errorf("zero: %q %v %q %q", s.Kind(), s.IsZero(), s.At(time.Now()), s)
		}
	}
	if got := mustNew(t, "day", "", "", "Europe/Berlin").String(); got != "per day in Europe/Berlin" {
		t.Error(got)
	}
	if got := mustNew(t, "", "0 2 * * *", "", "UTC").String(); got != `schedule "0 2 * * *" in UTC` {
		t.Error(got)
	}
	if got := mustNew(t, "", " @every 5m ", "", "UTC"); got.String() != `schedule "@every 5m" in UTC` || got.Kind() != KindSchedule {
		t.Error(got.String(), got.Kind())
	}
	if got := mustNew(t, "", "*/2 * * * * *", "", "Europe/Berlin"); got.String() != `schedule "*/2 * * * * *" in Europe/Berlin` || got.Kind() != KindSchedule {
		t.Error(got.String(), got.Kind())
	}
	if got := mustNew(t, "hour", "", "", "").Location(); got != time.Local {
		t.Errorf("tz \"\" = %v, want Local", got)
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		per, sched, explicit, tz string
		want                     string // substring of the message
	}{
		{"day", "0 2 * * *", "", "", "--per and --schedule are mutually exclusive"},
		{"day", "", "x", "", "--per and --slot are mutually exclusive"},
		{"", "@daily", "x", "", "--schedule and --slot are mutually exclusive"},
		{"day", "@daily", "x", "", "--per and --schedule and --slot"},
		{"fortnight", "", "", "", `--per "fortnight": want one of minute, hour, day, week, month`},
		{"Day", "", "", "", `--per "Day"`},
		{"day", "", "", "Mars/Base", `--tz "Mars/Base": unknown time zone; use an IANA name such as Europe/Berlin`},
		{"day", "", "", "CEST", "use an IANA name such as Europe/Berlin"},
		{"", "@daily", "", "../../etc/passwd", "--tz"},
		{"", "", "x", "Mars/Base", "--tz"},
		{"", "", "", "Mars/Base", "--tz"},
		{"", "@daily", "", "Europe/Berlin\n", "--tz"},
		{"", "0 2 * *", "", "UTC", "want 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, found 4"},
		{"", "0 0 0 2 * * *", "", "UTC", "found 7"},
		{"", "60 * * * * *", "", "UTC", "above maximum"},
		{"", "0 0 0 30 2 *", "", "UTC", "never fires"},
		{"", "60 * * * *", "", "UTC", "above maximum"},
		{"", "0 24 * * *", "", "UTC", "above maximum"},
		{"", "0 0 0 * *", "", "UTC", "below minimum"},
		{"", "0 0 * 13 *", "", "UTC", "above maximum"},
		{"", "0 0 * * 8", "", "UTC", "above maximum"},
		{"", "0 2 * * 8", "", "UTC", "above maximum (6): 8; fields are [second 0-59] minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT (0 and 7 are Sunday)"},
		{"", "0 2 * * 6-8", "", "UTC", "above maximum"},
		{"", "0 2 * * 07", "", "UTC", "above maximum"},
		{"", "5-1 * * * *", "", "UTC", "beyond end of range"},
		{"", "@every", "", "UTC", "want @every D with D a duration of whole seconds from 1s to 24h"},
		{"", "@every 5m 2s", "", "UTC", "want @every D"},
		{"", "@every five", "", "UTC", "want @every D"},
		{"", "@every 500ms", "", "UTC", "at least 1s and at most 24h"},
		{"", "@every 0s", "", "UTC", "at least 1s and at most 24h"},
		{"", "@every -5m", "", "UTC", "at least 1s and at most 24h"},
		{"", "@every 24h0m1s", "", "UTC", "at least 1s and at most 24h"},
		{"", "@every 1500ms", "", "UTC", "must be whole seconds"},
		{"", "@everyday", "", "UTC", "unknown descriptor"},
		{"", "TZ=UTC */2 * * * * *", "", "UTC", "use --tz"},
		{"", "@fortnightly", "", "UTC", "unknown descriptor"},
		{"", "TZ=UTC 0 2 * * *", "", "UTC", "use --tz"},
		{"", "CRON_TZ=UTC", "", "UTC", "use --tz"},
		{"", "garbage", "", "UTC", "found 1"},
		{"", "a b c d e", "", "UTC", `--schedule "a b c d e"`},
		{"", "   ", "", "UTC", "empty"},
		{"", "0 0 30 2 *", "", "UTC", "never fires"},
		{"", "0 0 31 4,6,9,11 *", "", "UTC", "never fires"},
		{"", "", "a/b", "", "'/' is not allowed"},
		{"", "", "a\nb", "", "only printable"},
		{"", "", "a\tb", "", "only printable"},
		{"", "", "\x7f", "", "only printable"},
		{"", "", " a", "", "leading or trailing spaces"},
		{"", "", "-", "", "print \"-\" for no slot"},
		{"", "", "\xff", "", "UTF-8"},
		{"", "", strings.Repeat("x", 201), "", "the limit is 200"},
		{"", "", "cafe\u0301", "", `--slot "cafe\u0301" is not in Unicode NFC form: write it as "café"`},
		{"", "", "\u212b", "", `--slot "\u212b" is not in Unicode NFC form: write it as "Å"`},                    // ANGSTROM SIGN
		{"", "", "\u1112\u1161\u11ab", "", `--slot "ᄒ\u1161\u11ab" is not in Unicode NFC form: write it as "한"`}, // Hangul jamo
		{"", "", "日本e\u0301", "", `--slot "日本e\u0301" is not in Unicode NFC form: write it as "日本é"`},
		{"", "", strings.Repeat("\u0344", 100), "", "is not in Unicode NFC form, and its NFC form is 412 bytes long; the limit is 200"},
	} {
		_, err := New(c.per, c.sched, c.explicit, c.tz)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%q, %q, %q, %q) = %v, want ErrInvalid", c.per, c.sched, c.explicit, c.tz, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.ContainsAny(msg, "\r\n") {
			t.Errorf("New(%q, %q, %q, %q) = %q, want one line containing %q", c.per, c.sched, c.explicit, c.tz, msg, c.want)
		}
	}
	for _, ok := range []string{"1", "batch 7", "2026-11-29", "ünïcødé:@.", strings.Repeat("x", 200), "caf\u00e9", "한",
		"\u0430pple", "\u00e9\u0301"} { // NFC, mixed scripts (Cyrillic а) too
		if _, err := New("", "", ok, ""); err != nil {
			t.Errorf("--slot %q: %v", ok, err)
		}
	}
	for _, ok := range []string{" 0 2 * * * ", "0 0 29 2 *", "0 0 ? * *", "0 0 * jan-mar sun", "*/5 * * * *",
		"*/2 * * * * *", "30 0 2 * * *", "0-59/15 * * * * mon-fri", "@every 1s", "@every 24h", "@every 1h30m", " @every\t90s "} {
		if _, err := New("", ok, "", "UTC"); err != nil {
			t.Errorf("--schedule %q: %v", ok, err)
		}
	}
}

func TestParse(t *testing.T) {
	berlin := "Europe/Berlin"
	for _, c := range []struct {
		per, sched, tz, value, start string // start "" = must fail
	}{
		{"day", "", berlin, "2026-11-29", "2026-11-29T00:00:00+01:00"},
		{"day", "", berlin, "2026-11-31", ""},
		{"day", "", berlin, "2026-1-29", ""},
		{"day", "", berlin, "2026-11-29 ", ""},
		{"day", "", berlin, "2026-11", ""},
		{"hour", "", berlin, "2026-11-29T02", "2026-11-29T02:00:00+01:00"},
		{"hour", "", berlin, "2026-11-29T24", ""},
		{"hour", "", berlin, "2026-03-29T02", ""}, // skipped by spring-forward
		{"minute", "", berlin, "2026-03-29T02:30", ""},
		{"minute", "", berlin, "2026-11-29T02:05", "2026-11-29T02:05:00+01:00"},
		{"month", "", berlin, "2026-11", "2026-11-01T00:00:00+01:00"},
		{"month", "", berlin, "2026-13", ""},
		{"week", "", berlin, "2026-W48", "2026-11-23T00:00:00+01:00"},
		{"week", "", berlin, "2026-W53", "2026-12-28T00:00:00+01:00"},
		{"week", "", berlin, "2025-W53", ""},
		{"week", "", berlin, "2026-W00", ""},
		{"week", "", berlin, "2026-W54", ""},
		{"week", "", berlin, "2026-w48", ""},
		{"week", "", berlin, "+026-W48", ""},
		{"week", "", berlin, "2026-W4", ""},
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00+08:00"},
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-28T18:00:00Z", "2026-11-29T02:00:00+08:00"}, // same instant
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:01+08:00", ""},
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-29T02:00:00.5+08:00", ""},
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-29T03:00:00+08:00", ""},
		{"", "0 2 * * *", "Asia/Shanghai", "2026-11-29", ""},
		{"", "0 2 * * *", "UTC", "2026-11-29T02:00:00Z", "2026-11-29T02:00:00Z"},
		{"", "0 2 * * *", "UTC", "2026-11-29T02:00:00+00:00", "2026-11-29T02:00:00Z"},
		{"", "*/2 * * * * *", "UTC", "2026-11-29T02:00:02+00:00", "2026-11-29T02:00:02Z"},
		{"", "*/2 * * * * *", "UTC", "2026-11-29T02:00:03+00:00", ""},
		{"", "*/2 * * * * *", "UTC", "2026-11-29T02:00:02.1+00:00", ""},
		{"", "30 30 2 * * *", berlin, "2026-03-29T02:30:30+01:00", ""}, // in the gap: fires at 03:00+02:00 instead
		{"", "30 30 2 * * *", berlin, "2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00Z"},
		{"", "*/2 * * * * *", berlin, "2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00Z"},
		{"", "*/2 * * * * *", berlin, "2026-10-25T02:30:00+01:00", "2026-10-25T01:30:00Z"}, // second pass
		{"", "30 30 2 * * *", berlin, "2026-10-25T02:30:30+01:00", ""},                     // fixed hour: first pass only
		{"", "@every 7m", "UTC", "2026-11-29T01:58:00+00:00", "2026-11-29T01:58:00Z"},
		{"", "@every 7m", "Asia/Kolkata", "2026-11-29T01:58:00Z", "2026-11-29T01:58:00Z"},
		{"", "@every 7m", "UTC", "2026-11-29T02:00:00+00:00", ""},
		{"", "@every 7m", "UTC", "2026-11-29T01:58:00.5Z", ""},
		{"", "@every 7m", "UTC", "2026-11-29", ""},
	} {
		s := mustNew(t, c.per, c.sched, "", c.tz)
		got, err := s.Parse(c.value)
		if c.start == "" {
			if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\n") {
				t.Errorf("%s: Parse(%q) = %v, %v; want ErrInvalid", s, c.value, got, err)
			}
			continue
		}
		if err != nil || !got.Equal(rfc(t, c.start)) {
			t.Errorf("%s: Parse(%q) = %v, %v; want %s", s, c.value, got, err, c.start)
		}
	}
}

func TestRange(t *testing.T) {
	s := mustNew(t, "day", "", "", "Europe/Berlin")
	from, to := rfc(t, "2026-10-24T00:00:00+02:00"), rfc(t, "2026-10-27T00:00:00+01:00")
	got, err := s.Range(from, to, 10)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, sl := range got {
		vals = append(vals, sl.Value+"@"+sl.Start.Format(time.RFC3339))
	}
	want := "2026-10-24@2026-10-24T00:00:00+02:00 2026-10-25@2026-10-25T00:00:00+02:00 " +
		"2026-10-26@2026-10-26T00:00:00+01:00 2026-10-27@2026-10-27T00:00:00+01:00"
	if strings.Join(vals, " ") != want {
		t.Errorf("Range = %v\nwant %v", vals, want)
	}
	// Bounds are inclusive; a from inside a slot excludes that slot (its start is before from).
	if got, _ := s.Range(from.Add(time.Second), to.Add(-time.Second), 10); len(got) != 2 {
		t.Errorf("open-ish range: %v", got)
	}
	if got, err := s.Range(from, from, 1); err != nil || len(got) != 1 {
		t.Errorf("one-slot range: %v %v", got, err)
	}
	if got, err := s.Range(from.Add(time.Hour), from.Add(2*time.Hour), 1); err != nil || len(got) != 0 {
		t.Errorf("empty range: %v %v", got, err)
	}
	if _, err := s.Range(to, from, 10); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "reversed") {
		t.Errorf("reversed: %v", err)
	}
	if _, err := s.Range(from, to, 3); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 3") {
		t.Errorf("too many: %v", err)
	}
	if _, err := s.Range(from, to, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("max 0: %v", err)
	}
	// A minute schedule over a long range stays fast and stops at max.
	m := mustNew(t, "", "* * * * *", "", "America/New_York")
	begin := time.Now()
	if _, err := m.Range(from, from.AddDate(10, 0, 0), 1000); !errors.Is(err, ErrInvalid) {
		t.Errorf("minute range over 10 years: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("Range took %v", d)
	}
	// Range, Next and Start agree: consecutive, each start maps back to its value.
	for _, sp := range []Spec{
		mustNew(t, "hour", "", "", "America/New_York"),
		mustNew(t, "", "30 1 * * *", "", "America/New_York"),
		mustNew(t, "", "*/20 * * * *", "", "Australia/Lord_Howe"),
	} {
		sl, err := sp.Range(rfc(t, "2026-01-01T00:00:00Z"), rfc(t, "2027-01-01T00:00:00Z"), 100000)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range sl {
			if i > 0 && (sp.Next(sl[i-1].Start) != x || !x.Start.After(sl[i-1].Start)) {
				t.Fatalf("%s: Next(%v) = %v, want %v", sp, sl[i-1], sp.Next(sl[i-1].Start), x)
			}
			if st, _ := sp.Start(x.Start); !st.Equal(x.Start) || sp.At(x.Start) != x.Value {
				t.Fatalf("%s: slot %v: Start = %v, At = %q", sp, x, st, sp.At(x.Start))
			}
			if p, err := sp.Parse(x.Value); err != nil || !p.Equal(x.Start) {
				t.Fatalf("%s: Parse(%q) = %v, %v", sp, x.Value, p, err)
			}
		}
	}
}

// Prev walks back exactly the slots Next walks forward, DST days included.
func TestPrevMirrorsNext(t *testing.T) {
	for _, c := range []struct{ sched, tz string }{{"30 2 * * *", "Europe/Berlin"}, {"*/10 * * * * *", "UTC"}, {"@every 90s", "UTC"}, {"0 * * * *", "America/New_York"}} {
		sp, err := New("", c.sched, "", c.tz)
		if err != nil {
			t.Fatal(err)
		}
		from := time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC)
		var fwd []Slot
		for sl := sp.Next(from); len(fwd) < 200; sl = sp.Next(sl.Start) {
			fwd = append(fwd, sl)
		}
		sl := sp.Prev(fwd[len(fwd)-1].Start)
		for i := len(fwd) - 1; i >= 0; i-- {
			if sl != fwd[i] {
				t.Fatalf("%s: back step %d: %+v, want %+v", c.sched, i, sl, fwd[i])
			}
			sl = sp.Prev(sl.Start.Add(-time.Nanosecond))
		}
	}
	if (Spec{}).Prev(time.Now()) != (Slot{}) {
		t.Fatal("no slot has no Prev")
	}
}
