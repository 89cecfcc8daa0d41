package slot

import (
	"strings"
	"time"
)

// maxEvery bounds "@every D": longer intervals are better written as cron ("0 2 * * *").
const maxEvery = 24 * time.Hour

// parseEvery accepts "@every D": D a Go duration of whole seconds from 1s to 24h.
func parseEvery(text string) (time.Duration, error) {
	f := strings.Fields(text)
	bad := func(why string) (time.Duration, error) {
		return 0, invalidf("--schedule %q: %s", text, why)
	}
	const want = "want @every D with D a duration of whole seconds from 1s to 24h, such as 30s, 5m or 1h30m"
	if f[0] != "@every" {
		return bad("unknown descriptor; want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every D")
	}
	if len(f) != 2 {
		return bad(want)
	}
	d, err := time.ParseDuration(f[1])
	switch {
	case err != nil:
		return bad(want)
	case d < time.Second || d > maxEvery:
		return bad("the interval must be at least 1s and at most 24h; " + want)
	case d%time.Second != 0:
		return bad("the interval must be whole seconds; " + want)
	}
	return d, nil
}

// everyPrev returns the start of the fixed slot containing t: floor(unix(t)/D)*D, in the
// Unix epoch's frame, so it does not depend on the zone or its clock changes.
func (s Spec) everyPrev(t time.Time) fire {
	d := int64(s.every / time.Second)
	sec := t.Unix() // floor, also before 1970
	q := sec / d
	if sec%d < 0 {
		q--
	}
	at := time.Unix(q*d, 0).In(s.loc)
	return fire{wall: at, at: at}
}

// prev returns the latest slot start at or before t.
func (s Spec) prev(t time.Time) (fire, bool) {
	if s.every > 0 {
		return s.everyPrev(t), true
	}
	return s.m.prev(t, s.loc)
}

// next returns the earliest slot start strictly after t.
func (s Spec) next(t time.Time) (fire, bool) {
	if s.every > 0 {
		at := s.everyPrev(t).at.Add(s.every)
		return fire{wall: at, at: at}, true
	}
	return s.m.next(t, s.loc)
}
