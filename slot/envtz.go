package slot

import (
	"os"
	"strings"
	"time"
)

// checkEnvTZ says whether time.Local is the zone that the environment's TZ asks for. Go reads TZ
// once, at start, and on a name it cannot load — a typo (Europe/Berln), a POSIX rule such as
// CET-1CEST,M3.5.0,M10.5.0/3 (which date(1), cron and libc read) — falls back to UTC without a
// word: a `TZ=` line in a crontab would then name the days of --per day in UTC, a run at 00:30
// local time would land in yesterday's slot, and hosts sharing a store would name one period two
// ways. TZ unset (/etc/localtime) and TZ empty (UTC, as POSIX says) are what they say; so are
// "UTC", and a POSIX rule of a zero offset without daylight saving time (UTC0, GMT0, UTC+0).
func checkEnvTZ() error {
	tz, ok := os.LookupEnv("TZ")
	if !ok {
		return nil
	}
	name := strings.TrimPrefix(tz, ":")
	if name == "" || name == "UTC" || zeroRule(name) || time.Local.String() != "UTC" {
		return nil
	}
	// An older once took it as UTC: its slots, in the ledger and on the hosts not yet upgraded, are
	// named in UTC, and a schedule's slot in another zone is the same instant under another name,
	// which runs again.
	return invalidf("TZ=%q names no zone once can read (a typo, or a POSIX rule: once reads IANA names such as Europe/Berlin), so local time would silently be UTC; give --tz ZONE, or fix TZ (an older once took it as UTC: --tz UTC keeps the slots it named, another zone renames them and a slot already run may run again)", tz)
}

// zeroRule reports whether name is a POSIX TZ rule of a zone at offset 0 without DST ("UTC0",
// "GMT0", "<UTC>0", "UTC+0", "GMT-0"), which Go's fallback to UTC gets right.
func zeroRule(name string) bool {
	std, ok := strings.CutSuffix(name, "0")
	if !ok {
		return false
	}
	if s, ok := strings.CutSuffix(std, "+"); ok {
		std = s
	} else {
		std = strings.TrimSuffix(std, "-")
	}
	if strings.HasPrefix(std, "<") && strings.HasSuffix(std, ">") {
		std = std[1 : len(std)-1]
	}
	if len(std) < 3 {
		return false
	}
	for _, r := range std {
		if (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}
