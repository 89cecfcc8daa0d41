// Package slot turns the `once run` flags --per, --schedule, --slot and --tz into slot values:
// the names under which the run ledger remembers that a task already succeeded.
//
// # Values
//
//	--per minute   2026-11-29T02:05
//	--per hour     2026-11-29T02
//	--per day      2026-11-29
//	--per week     2026-W48                   ISO 8601 week: Monday start; 2026-W01 starts 2025-12-29
//	--per month    2026-11
//	--schedule     2026-11-29T02:00:00+08:00  the fire time, RFC 3339 with its offset, never "Z"
//	--slot VALUE   VALUE as given (see CheckValue)
//
// --per values name the local period and carry no offset; --schedule values name an instant.
// Periods and fire times are computed in the --tz zone (time.Local when empty).
// Zones are loaded with time.LoadLocation: a program that must name zones on hosts without
// /usr/share/zoneinfo imports time/tzdata itself, as cmd/once does (package slot does not, so that
// a library user who does not need it does not pay ~450 kB for it).
//
// # Which slot an instant belongs to
//
// Every slot has a start instant. The slot containing t is the one with the latest start <= t:
// for --schedule, the latest fire time <= t, so a run at 02:03 after a reboot lands in the same
// slot as the 02:00 run the reboot interrupted. Slot values therefore never go backwards in
// time, and Next(t).Start is always after t.
//
// # Clock changes (DST)
//
// Fire times and period starts are wall-clock times in the zone, mapped to instants so:
//
//   - A wall time skipped by a spring-forward gap happens at the first instant after the gap.
//     A day whose midnight does not exist starts at the first instant that does; a schedule
//     "30 2 * * *" fires at 03:00 on the day 02:30 is skipped, and that instant is the slot
//     (2026-03-08T03:00:00-04:00 in America/New_York). Gap times that share an instant are one
//     slot. An hour or minute skipped entirely has no --per value (Parse rejects it).
//   - A wall time repeated by a fall-back starts a slot at its first occurrence only. For --per
//     that makes the repeated hour one two-hour slot (2026-11-01T01 in New York) and the day 25
//     hours long. A schedule whose hour field is "*" (e.g. "0 * * * *", @hourly,
//     "*/2 * * * * *") also fires at the second occurrence, which is a distinct slot because its
//     offset differs (01:00:00-04:00, then 01:00:00-05:00); a fixed-hour schedule such as
//     "30 1 * * *" or "30 30 1 * * *" fires once that day, as in cron(8).
//
// A seconds field changes none of this: "30 30 2 * * *" fires at 03:00:00 on the day 02:30:30
// is skipped. "@every D" is the exception: its slots are fixed intervals of real time and
// ignore clock changes (see Schedules).
//
// robfig/cron/v3 parses the cron text; fire times are computed here, because robfig's Next
// (v3.0.1) skips a 02:30 job entirely on spring-forward day and runs a 01:30 job twice on
// fall-back day.
//
// # Schedules
//
// Five fields (minute hour day-of-month month day-of-week, names like mon and jan allowed,
// day-of-week 0–6 with 0 = Sunday); six fields, the first being seconds (0–59):
// "*/2 * * * * *" fires every 2 seconds, "30 0 2 * * *" at 02:00:30; @yearly @annually
// @monthly @weekly @daily @midnight @hourly; or "@every D". TZ=/CRON_TZ= prefixes (use --tz)
// are rejected, and so is a schedule that can never fire ("0 0 30 2 *"). As in cron, when
// both day-of-month and day-of-week are restricted a day matches either.
//
// "@every D" takes a Go duration of whole seconds from 1s to 24h ("@every 30s", "@every 1h30m").
// Its slots are fixed intervals anchored at the Unix epoch: the slot containing t starts at
// floor(unix(t)/D)*D seconds, whatever the zone and its clock changes, so every node of a fleet
// computes the same slots without coordinating, and a restart does not shift them. --tz only
// chooses the offset the values are written with (RFC 3339, like other schedule values): in
// New York "@every 1h" gives 2026-11-01T01:00:00-04:00 and then 2026-11-01T01:00:00-05:00.
// (robfig's own @every counts from when its scheduler started, so nodes started at different
// times would disagree.) An interval that does not divide a day is not aligned to midnight or
// to the hour: "@every 7m" fires at 01:58:00Z, 02:05:00Z, …; and "@every 24h" fires at 00:00
// UTC, which is 08:00 in Asia/Shanghai (a daily job at a local time is "0 2 * * *").
//
// Cron searches look back or ahead at most 10 years, enough for the sparsest schedule
// ("0 0 29 2 *", 8 years apart around 2100).
package slot
