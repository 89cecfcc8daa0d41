package slot

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"
)

var fuzzZones = []string{
	"UTC", "America/New_York", "Europe/Berlin", "America/Sao_Paulo", "Asia/Beirut", "Pacific/Apia",
	"Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "America/Havana", "Europe/London",
	"Africa/Casablanca", "America/Santiago", "Asia/Tehran", "Antarctica/Troll", "Pacific/Kiritimati",
}

var fuzzSpecs = []struct{ per, sched string }{
	{"minute", ""}, {"hour", ""}, {"day", ""}, {"week", ""}, {"month", ""},
	{"", "30 2 * * *"}, {"", "0 * * * *"}, {"", "*/20 1-3 * * *"}, {"", "0 0 29 2 *"}, {"", "@weekly"},
	{"", "15 0 1,15 * mon"}, {"", "30 1 * * *"},
	{"", "*/2 * * * * *"}, {"", "30 30 1 * * *"}, {"", "@every 7m"}, {"", "@every 25s"},
}

// FuzzNew: any flag strings give a Spec or a one-line ErrInvalid, never a panic; a valid
// schedule always has a slot now.
func FuzzNew(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "@daily", "@every 5m", "0 0 30 2 *", "* * * * * *", "TZ=UTC", "CRON_TZ=x 1",
		"1-2/0 * * * *", "*/99999999999999999999 * * * *", "? ? ? ? ?", "0-59/1 0-23 1-31 1-12 0-6", "jan * * * *", "",
		"*/2 * * * * *", "30 0 2 * * *", "60 * * * * *", "0 0 0 30 2 *", "* * * * * * *", "@every 1s", "@every 24h",
		"@every 24h0m1s", "@every 0s", "@every -1s", "@every 1.5s", "@every 1h30m", "@every", "@every 5m 5m", "@everyday"} {
		f.Add("", s, "UTC")
	}
	for _, p := range []string{"day", "week", "fortnight", ""} {
		f.Add(p, "", "Europe/Berlin")
		f.Add(p, "", "../etc")
		f.Add(p, "", "Local")
	}
	at := time.Date(2026, 11, 29, 2, 3, 4, 0, time.UTC)
	f.Fuzz(func(t *testing.T, per, schedule, tz string) {
		s, err := New(per, schedule, "", tz)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("New(%q, %q, %q) = %q", per, schedule, tz, err)
			}
			return
		}
		if s.IsZero() {
			return
		}
		st, err := s.Start(at)
		if err != nil {
			t.Fatalf("%s: Start: %v", s, err)
		}
		v := s.At(at)
		if p, err := s.Parse(v); err != nil || !p.Equal(st) || st.After(at) {
			t.Fatalf("%s: At = %q, Start = %v, Parse = %v, %v", s, v, st, p, err)
		}
		if n := s.Next(at); !n.Start.After(at) {
			t.Fatalf("%s: Next = %+v", s, n)
		}
	})
}

// FuzzParse: slot values are validated, never panic, and whatever parses is canonical.
func FuzzParse(f *testing.F) {
	for _, v := range []string{"2026-11-29", "2026-11-29T02", "2026-11-29T02:05", "2026-W48", "2026-W53", "2026-11",
		"2026-11-29T02:00:00+08:00", "2026-11-29T02:00:00Z", "2026-03-08T03:00:00-04:00", "9999-99-99", "-001-W01",
		"0000-W01", "2026-02-29", "2026-11-29T02:00:00.000000001+08:00", "\xff", "",
		"2026-11-29T01:58:00+00:00", "2026-11-29T02:00:02+00:00", "2026-11-01T01:30:30-04:00", "1969-12-31T23:59:50Z",
		"1900-01-01T00:00:00+00:53"} {
		for i := range fuzzSpecs {
			f.Add(v, uint8(i), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, value string, si, zi uint8) {
		sp := fuzzSpecs[int(si)%len(fuzzSpecs)]
		s := mustNew(t, sp.per, sp.sched, "", fuzzZones[int(zi)%len(fuzzZones)])
		p, err := s.Parse(value)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("%s: Parse(%q) = %q", s, value, err)
			}
			return
		}
		if st, err := s.Start(p); err != nil || !st.Equal(p) {
			t.Fatalf("%s: Parse(%q) = %v is not a slot start (%v, %v)", s, value, p, st, err)
		}
		if sp.per != "" && s.At(p) != value {
			t.Fatalf("%s: Parse(%q) = %v, At = %q", s, value, p, s.At(p))
		}
	})
}

// FuzzRoundTrip: for any instant 1980–2100 in zones with odd DST histories, the slot's start is
// <= t, maps back to its value, and Next starts after t with no other slot in between.
func FuzzRoundTrip(f *testing.F) {
	for i := range fuzzSpecs {
		f.Add(int64(1793232000), uint8(i), uint8(i))      // 2026-10-29
		f.Add(int64(1325239200), uint8(i), uint8(5))      // Apia, 2011-12-30
		f.Add(int64(1792890000), uint8(i), uint8(4))      // Beirut fall-back
		f.Add(int64(1541300400), uint8(i), uint8(3))      // Sao Paulo 2018
		f.Add(int64(1772953200), uint8(i), uint8(1))      // New York spring-forward
		f.Add(int64(1774746000+3600), uint8(i), uint8(2)) // Berlin
		f.Add(int64(1793512800), uint8(i), uint8(1))      // New York fall-back
		f.Add(int64(1792890001), uint8(i), uint8(2))      // Berlin fall-back
	}
	lo, hi := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	f.Fuzz(func(t *testing.T, sec int64, si, zi uint8) {
		if sec < lo || sec > hi {
			sec = lo + (sec%(hi-lo)+(hi-lo))%(hi-lo)
		}
		sp := fuzzSpecs[int(si)%len(fuzzSpecs)]
		s := mustNew(t, sp.per, sp.sched, "", fuzzZones[int(zi)%len(fuzzZones)])
		checkRoundTrip(t, s, time.Unix(sec, 0))
	})
}

// fiveFields are 5-field schedules the seconds-field fuzz puts a seconds field in front of.
var fiveFields = []string{"* * * * *", "30 2 * * *", "0 * * * *", "*/20 1-3 * * *", "30 1 * * *", "0 0 29 2 *", "15 0 1,15 * mon", "@daily"}

// FuzzSecondsAndEvery checks the forms beyond 5-field cron. A fuzzed seconds field in front of a
// 5-field schedule gives a one-line ErrInvalid or a Spec with the round-trip invariants, and
// "0 FIVE" fires exactly when FIVE does. "@every D" (D whole seconds, 1s–24h) keeps the round
// trips, its slot starts are multiples of D since the Unix epoch and D apart, the same instants
// in every zone, and for D dividing a minute the same as "*/D * * * * *" in UTC.
func FuzzSecondsAndEvery(f *testing.F) {
	for i := range fiveFields {
		f.Add(int64(1772953200), "*/2", uint32(2), uint8(i), uint8(1))   // New York spring-forward
		f.Add(int64(1793512800), "30", uint32(3600), uint8(i), uint8(1)) // New York fall-back
		f.Add(int64(1774746000), "0-10/5", uint32(420), uint8(i), uint8(2))
		f.Add(int64(1792890001), "59", uint32(86400), uint8(i), uint8(2))
		f.Add(int64(1325239200), "*", uint32(1), uint8(i), uint8(5))
		f.Add(int64(1793232000), "61", uint32(0), uint8(i), uint8(0))
	}
	lo, hi := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	f.Fuzz(func(t *testing.T, sec int64, secField string, every uint32, si, zi uint8) {
		if sec < lo || sec > hi {
			sec = lo + (sec%(hi-lo)+(hi-lo))%(hi-lo)
		}
		x := time.Unix(sec, 0)
		zone := fuzzZones[int(zi)%len(fuzzZones)]
		five := fiveFields[int(si)%len(fiveFields)]
		if !strings.HasPrefix(five, "@") {
			s, err := New("", secField+" "+five, "", zone)
			if err != nil {
				if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
					t.Fatalf("New(%q) = %q", secField+" "+five, err)
				}
			} else {
				checkRoundTrip(t, s, x)
			}
			a, b := mustNew(t, "", "0 "+five, "", zone), mustNew(t, "", five, "", zone)
			if an, bn := a.Next(x), b.Next(x); a.At(x) != b.At(x) || an.Value != bn.Value || !an.Start.Equal(bn.Start) {
				t.Fatalf("%s and %s differ at %s: %q %q, %v %v", a, b, x, a.At(x), b.At(x), a.Next(x), b.Next(x))
			}
		}
		d := time.Duration(every%86400+1) * time.Second
		e := mustNew(t, "", "@every "+d.String(), "", zone)
		checkRoundTrip(t, e, x)
		st, err := e.Start(x)
		if err != nil || st.Unix()%int64(d/time.Second) != 0 || st.Nanosecond() != 0 || e.Next(x).Start.Sub(st) != d {
			t.Fatalf("%s at %s: Start = %v (%v), Next = %v", e, x, st, err, e.Next(x))
		}
		if u, _ := mustNew(t, "", "@every "+d.String(), "", "UTC").Start(x); !u.Equal(st) {
			t.Fatalf("%s at %s: Start = %v, in UTC %v", e, x, st, u)
		}
		if 60%int64(d/time.Second) == 0 {
			c := mustNew(t, "", "*/"+strconv.Itoa(int(d/time.Second))+" * * * * *", "", "UTC")
			if cs, _ := c.Start(x); !cs.Equal(st) || !c.Next(x).Start.Equal(e.Next(x).Start) {
				t.Fatalf("%s and %s differ at %s: %v %v", e, c, x, st, cs)
			}
		}
	})
}

// FuzzCheckValue: any string is a valid --slot value or a one-line ErrInvalid, never a panic. An
// accepted value is in Unicode NFC, so that two encodings of what looks like one value (NFC "café"
// and NFD "cafe\u0301") are never two slots; a value refused for its form names the NFC form to
// write, and that form is accepted.
func FuzzCheckValue(f *testing.F) {
	for _, v := range []string{"batch-7", "2026-11-29", "café", "cafe\u0301", "Cafe\u0301\u0327", "\u212b", "한",
		"\u1112\u1161\u11ab", "\u0430pple", "e\u0301/x", " e\u0301", "\u0344", strings.Repeat("e\u0301", 67),
		strings.Repeat("\u0344", 100), "\U0001d15e", "\xff", "-", ""} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		err := CheckValue(v)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("CheckValue(%q) = %q", v, err)
			}
			if msg, want := err.Error(), "is not in Unicode NFC form: write it as "; strings.Contains(msg, want) {
				n := norm.NFC.String(v)
				if !strings.HasSuffix(msg, want+strconv.Quote(n)) || CheckValue(n) != nil {
					t.Fatalf("CheckValue(%q) = %q; the NFC form %q: %v", v, msg, n, CheckValue(n))
				}
			}
			return
		}
		if !norm.NFC.IsNormalString(v) {
			t.Fatalf("CheckValue(%q) accepts a value not in NFC (%q)", v, norm.NFC.String(v))
		}
		if _, err := New("", "", v, ""); err != nil {
			t.Fatalf("CheckValue(%q) = nil, New: %v", v, err)
		}
	})
}
