package slot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
)

// ErrInvalid is wrapped by every error about a bad flag value, schedule, zone or slot value.
var ErrInvalid = errors.New("slot: invalid")

// invalidError is a one-line message for users that still matches errors.Is(err, ErrInvalid).
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// Kinds returned by Spec.Kind.
const (
	KindNone     = ""
	KindPer      = "per"
	KindSchedule = "schedule"
	KindSlot     = "slot"
)

// Periods accepted by --per, and the layout of their slot values.
var periods = map[string]struct {
	layout  string // time layout of the value ("" for week, which is ISO "2006-W01")
	example string
	m       matcher
}{
	"minute": {"2006-01-02T15:04", "2026-11-29T02:05", matcher{second: 1, minute: minuteMask, hour: hourMask, dom: domMask, month: monthMask, dow: dowMask, domStar: true, dowStar: true}},
	"hour":   {"2006-01-02T15", "2026-11-29T02", matcher{second: 1, minute: 1, hour: hourMask, dom: domMask, month: monthMask, dow: dowMask, domStar: true, dowStar: true}},
	"day":    {"2006-01-02", "2026-11-29", matcher{second: 1, minute: 1, hour: 1, dom: domMask, month: monthMask, dow: dowMask, domStar: true, dowStar: true}},
	"week":   {"", "2026-W48", matcher{second: 1, minute: 1, hour: 1, dom: domMask, month: monthMask, dow: 1 << time.Monday, domStar: true}},
	"month":  {"2006-01", "2026-11", matcher{second: 1, minute: 1, hour: 1, dom: 1 << 1, month: monthMask, dow: dowMask, dowStar: true}},
}

// scheduleLayout is RFC 3339 with the numeric offset always written: "+00:00", never "Z", so
// that every --schedule slot value has the same shape whatever the zone and season.
const scheduleLayout = "2006-01-02T15:04:05-07:00"

// MaxValueLen is the longest explicit --slot value, in bytes.
const MaxValueLen = 200

// Spec is a parsed slot configuration: none, a --per period, a --schedule, or an explicit --slot.
// The zero Spec means "no slot". A Spec is immutable and safe for concurrent use.
type Spec struct {
	kind     string
	per      string // period name for KindPer
	schedule string // cron text for KindSchedule
	explicit string // value for KindSlot
	loc      *time.Location
	m        matcher       // KindPer, and KindSchedule unless every is set
	every    time.Duration // KindSchedule "@every D": fixed slots of D anchored at the Unix epoch
}

// New validates the --per, --schedule, --slot and --tz flag values ("" = not given) and builds a
// Spec. tz "" means time.Local (refused for --per and --schedule when the environment's TZ names a
// zone Go could not load, so that time.Local fell back to UTC); tz is validated even when unused (--slot, or no slot). At most one of per, schedule and
// explicit may be set. Every error wraps ErrInvalid and is one line naming the bad flag.
func New(per, schedule, explicit, tz string) (Spec, error) {
	var given []string
	if per != "" {
		given = append(given, "--per")
	}
	if schedule != "" {
		given = append(given, "--schedule")
	}
	if explicit != "" {
		given = append(given, "--slot")
	}
	if len(given) > 1 {
		return Spec{}, invalidf("%s are mutually exclusive: give only one of them", strings.Join(given, " and "))
	}
	loc, err := loadZone(tz) // a bad --tz is an error even where it is unused
	if err != nil {
		return Spec{}, err
	}
	if explicit != "" {
		if err := CheckValue(explicit); err != nil {
			return Spec{}, err
		}
		return Spec{kind: KindSlot, explicit: explicit}, nil
	}
	if per == "" && schedule == "" {
		return Spec{}, nil
	}
	if tz == "" || tz == "Local" { // time.LoadLocation("Local") is time.Local
		if err := checkEnvTZ(); err != nil {
			return Spec{}, err
		}
	}
	if per != "" {
		p, ok := periods[per]
		if !ok {
			return Spec{}, invalidf("--per %q: want one of minute, hour, day, week, month", per)
		}
		return Spec{kind: KindPer, per: per, loc: loc, m: p.m}, nil
	}
	sp := Spec{kind: KindSchedule, schedule: strings.TrimSpace(schedule), loc: loc}
	if strings.HasPrefix(sp.schedule, "@every") {
		sp.every, err = parseEvery(schedule)
	} else {
		sp.m, err = parseSchedule(schedule)
	}
	if err != nil {
		return Spec{}, err
	}
	return sp, nil
}

func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.Local, nil
	}
	const hint = "use an IANA name such as Europe/Berlin"
	if !utf8.ValidString(tz) || strings.ContainsFunc(tz, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) {
		return nil, invalidf("--tz %q: not a time zone name; %s", tz, hint)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, invalidf("--tz %q: unknown time zone; %s", tz, hint)
	}
	return loc, nil
}

// scheduleWant is how error messages describe the accepted schedule forms.
const scheduleWant = `5 fields (minute hour day-of-month month day-of-week) such as "0 2 * * *", 6 with a leading seconds field such as "*/10 * * * * *", @daily-style, or "@every 30s"`

// parseSchedule accepts 5-field cron, 6-field cron with a leading seconds field, and the
// descriptors @yearly @annually @monthly @weekly @daily @midnight @hourly, using robfig/cron's
// parser for the fields only: fire times are computed by this package (robfig's Next skips a
// 02:30 job on spring-forward day and runs a 01:30 job twice on fall-back day). "@every" is
// parseEvery's.
func parseSchedule(text string) (m matcher, err error) {
	spec := strings.TrimSpace(text)
	bad := func(why string) error {
		return invalidf("--schedule %q: %s", text, why)
	}
	switch {
	case spec == "":
		return m, bad("empty; want " + scheduleWant)
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return m, bad("a zone prefix is not supported; use --tz")
	case strings.HasPrefix(spec, "@"):
		switch spec {
		case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
		default:
			return m, bad("unknown descriptor; want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every D")
		}
	default:
		if n := len(strings.Fields(spec)); n != 5 && n != 6 {
			return m, bad(fmt.Sprintf("want 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, found %d", n))
		}
	}
	defer func() { // robfig's parser is not ours; never let it take the process down
		if r := recover(); r != nil {
			err = bad("cannot parse")
		}
	}()
	// SecondOptional: 6 fields start with seconds; 5 fields get second 0.
	s, perr := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(sundaySeven(spec))
	if perr != nil { // robfig's words say what is wrong, not what a field takes
		return m, bad(oneLine(perr.Error()) + "; " + cronFields)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return m, bad("unsupported schedule")
	}
	m = matcher{
		second: ss.Second, minute: ss.Minute, hour: ss.Hour, dom: ss.Dom, month: ss.Month, dow: ss.Dow,
		domStar: ss.Dom&starBit != 0, dowStar: ss.Dow&starBit != 0,
		repeats: ss.Hour&hourMask == hourMask,
	}
	if !m.fires() {
		return m, bad("never fires (no date matches the day-of-month, month and day-of-week fields)")
	}
	return m, nil
}

// cronFields says what each cron field takes: the fix for a field robfig refused (a bare
// "above maximum (6): 8" says nothing of the field's range).
const cronFields = "fields are [second 0-59] minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT (0 and 7 are Sunday)"

// sundaySeven rewrites the day-of-week field (the last) so that 7 is Sunday, as crontab(5) has it
// ("0 2 * * 7", "* * * * 5-7"), for robfig's parser, which takes 0-6 only: an item whose bound is 7
// ("7", "5-7", "1-7/2", "7/2") becomes the list of the days it names, with 0 for 7. Anything else,
// names included, is left for robfig to take or refuse.
func sundaySeven(spec string) string {
	fields := strings.Fields(spec)
	if len(fields) != 5 && len(fields) != 6 {
		return spec
	}
	dow := fields[len(fields)-1]
	items := strings.Split(dow, ",")
	changed := false
	for i, item := range items {
		if days, ok := daysWithSeven(item); ok {
			items[i] = days
			changed = true
		}
	}
	if !changed {
		return spec
	}
	fields[len(fields)-1] = strings.Join(items, ",")
	return strings.Join(fields, " ")
}

// daysWithSeven expands one day-of-week item whose low or high bound is 7 ("7", "a-7", "a-7/n",
// "7/n") to a comma list of days (7 written 0); ok is false for any other item.
func daysWithSeven(item string) (string, bool) {
	rng, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n < 1 || n > 7 {
			return "", false
		}
		step = n
	}
	loText, hiText, isRange := strings.Cut(rng, "-")
	lo, err := strconv.Atoi(loText)
	if err != nil || lo < 0 || lo > 7 || len(loText) > 1 {
		return "", false
	}
	hi := lo
	switch {
	case isRange:
		if hi, err = strconv.Atoi(hiText); err != nil || hi < lo || hi > 7 || len(hiText) > 1 {
			return "", false
		}
	case hasStep: // "N/step" is N to the field's end, as robfig reads it
		hi = 7
	}
	if lo != 7 && hi != 7 {
		return "", false
	}
	var days []string
	for d := lo; d <= hi; d += step {
		days = append(days, strconv.Itoa(d%7))
	}
	return strings.Join(days, ","), true
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// CheckValue validates an explicit --slot value: 1–200 bytes of valid UTF-8 in Unicode NFC
// (checkNFC: "café" has one encoding), printable characters only (no control characters; ASCII
// space is allowed but not at either end), and no '/'. Values end up in history, log lines and environment variables, and
// ONCE_IDEMPOTENCY_KEY is TASK/SLOT: a task may contain '/', a slot never does, so the key
// splits unambiguously at its last '/'. "-" alone is how once's tables print no slot: a slot of
// that name read as none. Errors wrap ErrInvalid.
func CheckValue(v string) error {
	switch {
	case v == "":
		return invalidf("--slot: empty value")
	case v == "-":
		return invalidf("--slot \"-\": once's tables print \"-\" for no slot; name the slot otherwise (leave --slot out for none)")
	case len(v) > MaxValueLen:
		return invalidf("--slot: value is %d bytes long; the limit is %d", len(v), MaxValueLen)
	case !utf8.ValidString(v):
		return invalidf("--slot %q: not valid UTF-8", v)
	case strings.ContainsRune(v, '/'):
		return invalidf("--slot %q: '/' is not allowed; use another separator such as '-' or ':'", v)
	case strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }):
		return invalidf("--slot %q: only printable characters are allowed (no control characters, tabs or newlines)", v)
	case v[0] == ' ' || v[len(v)-1] == ' ':
		return invalidf("--slot %q: leading or trailing spaces are not allowed", v)
	}
	return checkNFC(v)
}

// Kind returns "" (no slot), "per", "schedule" or "slot".
func (s Spec) Kind() string { return s.kind }

// IsZero reports whether no slot is configured.
func (s Spec) IsZero() bool { return s.kind == KindNone }

// Location returns the zone periods and schedules are computed in; nil for --slot and no slot.
func (s Spec) Location() *time.Location { return s.loc }

// String describes the Spec for log lines and messages, e.g. `per day in Europe/Berlin`,
// `schedule "0 2 * * *" in UTC`, `schedule "*/2 * * * * *" in UTC`, `schedule "@every 5m" in UTC`,
// `slot "batch-7"` or `no slot`. A schedule is shown as given, without surrounding spaces.
func (s Spec) String() string {
	switch s.kind {
	case KindPer:
		return fmt.Sprintf("per %s in %s", s.per, s.loc)
	case KindSchedule:
		return fmt.Sprintf("schedule %q in %s", s.schedule, s.loc)
	case KindSlot:
		return fmt.Sprintf("slot %q", s.explicit)
	}
	return "no slot"
}

// At returns the slot value for the instant t: "" when IsZero, the explicit value for --slot,
// else the value of the slot whose start is the latest one <= t (see Start). It returns ""
// only if Start fails, which needs a t within 10 years of the year 1.
func (s Spec) At(t time.Time) string {
	switch s.kind {
	case KindSlot:
		return s.explicit
	case KindPer, KindSchedule:
		f, ok := s.prev(t)
		if !ok {
			return ""
		}
		return s.format(f)
	}
	return ""
}

func (s Spec) format(f fire) string {
	if s.kind == KindSchedule {
		return f.at.In(s.loc).Format(scheduleLayout)
	}
	if s.per == "week" {
		y, w := f.wall.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	}
	return f.wall.Format(periods[s.per].layout)
}

// Start returns the instant the slot containing t starts: the latest period start or fire time
// <= t. Errors (wrapping ErrInvalid) for --slot and no slot, which have no start, and when no
// start exists within 10 years before t.
func (s Spec) Start(t time.Time) (time.Time, error) {
	if s.kind != KindPer && s.kind != KindSchedule {
		return time.Time{}, invalidf("%s has no start time", s)
	}
	f, ok := s.prev(t)
	if !ok {
		return time.Time{}, invalidf("%s: no slot starts in the 10 years before %s", s, t.Format(time.RFC3339))
	}
	return f.at, nil
}

// Parse turns a slot value back into its start instant, validating it: Parse(At(t)) == Start(t).
// A --per value must be in the period's format and name a period that exists in the zone (an
// hour skipped by a DST change does not). A --schedule value is any RFC 3339 time (offset or
// Z) equal to a fire time. Errors wrap ErrInvalid; --slot and no slot always fail.
func (s Spec) Parse(value string) (time.Time, error) {
	switch s.kind {
	case KindPer:
		return s.parsePer(value)
	case KindSchedule:
		return s.parseSchedule(value)
	}
	return time.Time{}, invalidf("%s has no slot values with a start time", s)
}

func (s Spec) parsePer(value string) (time.Time, error) {
	p := periods[s.per]
	bad := func(why string) (time.Time, error) {
		return time.Time{}, invalidf("slot %q: %s", value, why)
	}
	want := fmt.Sprintf("not a %s (want e.g. %s)", s.per, p.example)
	var w time.Time
	if s.per == "week" {
		if len(value) != 8 || value[4:6] != "-W" || !digits(value[:4]) || !digits(value[6:]) {
			return bad(want)
		}
		y, _ := strconv.Atoi(value[:4])
		wk, _ := strconv.Atoi(value[6:])
		if wk < 1 || wk > 53 {
			return bad(want)
		}
		jan4 := time.Date(y, 1, 4, 0, 0, 0, 0, time.UTC)
		w = jan4.AddDate(0, 0, -((int(jan4.Weekday())+6)%7)+(wk-1)*7)
		if gy, gw := w.ISOWeek(); gy != y || gw != wk {
			return bad(fmt.Sprintf("ISO year %d has no week %d", y, wk))
		}
	} else {
		var err error
		if w, err = time.Parse(p.layout, value); err != nil || w.Format(p.layout) != value {
			return bad(want)
		}
	}
	// The slot named value starts at or before an instant whose wall clock is w, or, when w
	// lies in a DST gap, right after it. A fall-back shows w twice and time.Date may pick
	// either, so also try w under the offsets in force a day before and after.
	g := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), 0, 0, s.loc)
	for _, c := range []time.Time{g, w.Add(-offsetAt(g.Add(-24*time.Hour), s.loc)), w.Add(-offsetAt(g.Add(24*time.Hour), s.loc))} {
		if f, ok := s.prev(c); ok && s.format(f) == value {
			return f.at, nil
		}
		if f, ok := s.next(c); ok && s.format(f) == value {
			return f.at, nil
		}
	}
	return bad(fmt.Sprintf("does not exist in %s (skipped by a clock change)", s.loc))
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (s Spec) parseSchedule(value string) (time.Time, error) {
	x, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, invalidf("slot %q: not an RFC 3339 time (want e.g. 2026-11-29T02:00:00+08:00)", value)
	}
	if f, ok := s.prev(x); ok && f.at.Equal(x) {
		return f.at, nil
	}
	// An offset with seconds (historic zones) loses them in RFC 3339, so x may be up to 59s off
	// the fire time written as value: look for it within a minute either side.
	for f, ok := s.next(x.Add(-time.Minute)); ok && !f.at.After(x.Add(time.Minute)); f, ok = s.next(f.at) {
		if s.format(f) == value {
			return f.at, nil
		}
	}
	return time.Time{}, invalidf("slot %q: not a fire time of %s", value, s)
}

// Slot is one slot: its value and the instant it starts.
type Slot struct {
	Value string
	Start time.Time
}

// Range lists the slots whose start lies in [from, to], oldest first. It fails (ErrInvalid)
// when to is before from, when max < 1 or the range holds more than max slots, and for --slot
// and no slot.
func (s Spec) Range(from, to time.Time, max int) ([]Slot, error) {
	if s.kind != KindPer && s.kind != KindSchedule {
		return nil, invalidf("%s has no range of slots", s)
	}
	if to.Before(from) {
		return nil, invalidf("range is reversed: %s is before %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	if max < 1 {
		return nil, invalidf("range limit %d: must be at least 1", max)
	}
	var out []Slot
	f, ok := s.next(from.Add(-time.Nanosecond))
	for ok && !f.at.After(to) {
		if len(out) == max {
			return nil, invalidf("range %s to %s holds more than %d slots of %s", from.Format(time.RFC3339), to.Format(time.RFC3339), max, s)
		}
		out = append(out, Slot{Value: s.format(f), Start: f.at})
		f, ok = s.next(f.at)
	}
	return out, nil
}

// Next returns the slot after the one containing t: the first slot that starts after t. It is
// the zero Slot for --slot and no slot, and when no slot starts within 10 years after t.
func (s Spec) Next(t time.Time) Slot {
	if s.kind != KindPer && s.kind != KindSchedule {
		return Slot{}
	}
	f, ok := s.next(t)
	if !ok {
		return Slot{}
	}
	return Slot{Value: s.format(f), Start: f.at}
}

// Prev returns the slot containing t: the one whose start is the latest at or before t, so
// that Prev(s.Start.Add(-time.Nanosecond)) walks back one slot. It is the zero Slot for --slot
// and no slot, and when no slot starts within 10 years before t.
func (s Spec) Prev(t time.Time) Slot {
	if s.kind != KindPer && s.kind != KindSchedule {
		return Slot{}
	}
	f, ok := s.prev(t)
	if !ok {
		return Slot{}
	}
	return Slot{Value: s.format(f), Start: f.at}
}
