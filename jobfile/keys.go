package jobfile

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// value is one key's value as read, and where: v is a string, int64, []any or map[string]any from
// TOML, a string from a crontab's "# once:" options, or a []string command from a crontab line.
type value struct {
	v    any
	line int
	from string // "" or " (from [defaults])"
}

// optText is the text of a crontab's "# once:" option: numbers are written as text there, while
// TOML has integers.
type optText string

// fields are one job's keys before validation.
type fields map[string]value

// jobKeys are the keys of a job, in the order the docs and ImportCrontab list them.
var jobKeys = []string{"name", "schedule", "tz", "command", "dir", "env", "timeout", "ttl", "grace",
	"on-unknown", "max-attempts", "retry-backoff", "catch-up", "catch-up-max", "jitter", "notify", "ping", "overlap", "limit"}

// defaultsKeys may be given in [defaults]: every job key but the three that make a job itself.
func defaultsKey(k string) bool {
	return k != "name" && k != "schedule" && k != "command" && isJobKey(k)
}

func isJobKey(k string) bool {
	for _, x := range jobKeys {
		if x == k {
			return true
		}
	}
	return false
}

// unknownKey says a key is unknown, with the likely key meant when there is one.
func unknownKey(k, where string, allowed func(string) bool) string {
	var ok []string
	for _, x := range jobKeys {
		if allowed(x) {
			ok = append(ok, x)
		}
	}
	msg := fmt.Sprintf("unknown key %q in %s", k, where)
	if guess := closest(k, ok); guess != "" {
		return msg + fmt.Sprintf(": did you mean %s?", guess)
	}
	return msg + ": use one of " + strings.Join(ok, ", ")
}

// closest is the key k was probably meant to be: the same in lower case with '-' for '_', or one
// typo away (edit distance 1, or 2 for longer keys); "" if none.
func closest(k string, keys []string) string {
	norm := strings.ReplaceAll(strings.ToLower(k), "_", "-")
	for _, x := range keys {
		if x == norm || strings.ReplaceAll(x, "-", "") == norm {
			return x
		}
	}
	for _, x := range keys {
		limit := 1
		if len(x) > 5 {
			limit = 2
		}
		if store.EditDistance(norm, x) <= limit {
			return x
		}
	}
	return ""
}

// Bounds of the durations and counts (docs/jobs-file.md). A lease longer than a day is a typo
// (the same bound as once run's --ttl); a grace beyond an hour, too (--grace).
const (
	day             = 24 * time.Hour
	maxTimeout      = 7 * day
	maxTTL          = day
	minTTL          = time.Second
	maxGrace        = time.Hour
	maxRetryBackoff = day
	// minRetryBackoff: a shorter wait is not kept (a retry comes at the daemon's next --poll) and
	// was a failing command run again and again, thousands of attempts a day without max-attempts.
	minRetryBackoff = time.Second
	maxCatchUp      = 10 * 366 * day
	maxJitter       = day
	maxAttempts     = store.MaxFailures
	maxCatchUpMax   = once.MaxCatchUpWindowSlots
)

var durationKeys = map[string]struct {
	min, max time.Duration
	field    func(*Job) *time.Duration
	example  string
}{
	"timeout":       {0, maxTimeout, func(j *Job) *time.Duration { return &j.Timeout }, "1h"},
	"ttl":           {minTTL, maxTTL, func(j *Job) *time.Duration { return &j.TTL }, "2m"},
	"grace":         {0, maxGrace, func(j *Job) *time.Duration { return &j.Grace }, "30s"},
	"retry-backoff": {minRetryBackoff, maxRetryBackoff, func(j *Job) *time.Duration { return &j.RetryBackoff }, "1m"},
	"catch-up":      {0, maxCatchUp, func(j *Job) *time.Duration { return &j.CatchUp }, "6h"},
	"jitter":        {0, maxJitter, func(j *Job) *time.Duration { return &j.Jitter }, "30s"},
}

// build validates one job's fields into a Job. file and line are where the job starts; a bad key's
// error points at the key's own line.
func build(file string, line int, f fields) (Job, error) {
	j := Job{Source: source(file, line), OnUnknown: string(once.PolicyReview), Overlap: "skip", Limit: 1}
	bad := func(k, format string, args ...any) error {
		at := line
		if v, ok := f[k]; ok && v.line > 0 {
			at = v.line
		}
		return errorf(file, at, "%s%s", fmt.Sprintf(format, args...), f[k].from)
	}
	for _, k := range []string{"name", "schedule", "command"} {
		if _, ok := f[k]; !ok {
			return Job{}, errorf(file, line, "job has no %s: add %s", k, missingHint[k])
		}
	}
	for _, k := range jobKeys {
		v, ok := f[k]
		if !ok {
			continue
		}
		if err := set(&j, k, v.v); err != "" {
			return Job{}, bad(k, "%s", err)
		}
	}
	if _, ok := f["catch-up-max"]; ok && j.CatchUp == 0 {
		return Job{}, bad("catch-up-max", "catch-up-max needs a catch-up window: add catch-up = \"6h\" (or remove catch-up-max)")
	}
	if err := j.CheckLimit(); err != nil {
		k := "overlap"
		if f["limit"].line > f["overlap"].line {
			k = "limit"
		}
		return Job{}, bad(k, "%s", err)
	}
	if j.CatchUp > 0 && j.CatchUpMax == 0 {
		j.CatchUpMax = 1
	}
	if _, err := j.Spec(); err != nil {
		k := "schedule"
		if strings.Contains(err.Error(), "--tz") {
			k = "tz"
		}
		return Job{}, bad(k, "%s", flagWords.Replace(err.Error()))
	}
	if err := j.CheckJitter(); err != nil {
		return Job{}, bad("jitter", "%s", err)
	}
	return j, nil
}

var missingHint = map[string]string{
	"name":     `name = "backup" (letters, digits and . _ : @ / -)`,
	"schedule": `schedule = "0 2 * * *" (5 cron fields, 6 with seconds, @daily or @every 5m)`,
	"command":  `command = ["/usr/local/bin/backup", "--full"], or a string run by sh -c`,
}

// flagWords turns package slot's messages, written for once run's flags, into the file's keys.
var flagWords = strings.NewReplacer("--schedule", "schedule", "--tz", "tz")

// set validates one key's value into j; "" when good, else what is wrong and how to fix it.
func set(j *Job, k string, v any) string {
	if o, ok := v.(optText); ok && !intKeys[k] {
		v = string(o)
	}
	if d, ok := durationKeys[k]; ok {
		if text, ok := v.(string); ok && k == "retry-backoff" {
			if zero, ok := parseDuration(text); ok && zero == 0 {
				*d.field(j) = 0 // none, as the key left out: only a wait under 1s is refused
				return ""
			}
		}
		dur, msg := durationValue(k, v, d.min, d.max, d.example)
		*d.field(j) = dur
		return msg
	}
	switch k {
	case "command":
		cmd, msg := commandValue(v)
		j.Command = cmd
		return msg
	case "env":
		env, msg := envValue(v)
		j.Env = env
		return msg
	case "max-attempts":
		n, msg := intValue(k, v, 0, maxAttempts, "0 (no limit)")
		j.MaxAttempts = n
		return msg
	case "catch-up-max":
		n, msg := intValue(k, v, 1, maxCatchUpMax, "1")
		j.CatchUpMax = n
		return msg
	case "limit":
		n, msg := intValue(k, v, 1, store.MaxLimit, "2")
		j.Limit = n
		return msg
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Sprintf("%s must be a string, such as %s", k, stringExample[k])
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Sprintf("%s contains a NUL byte: remove it", k)
	}
	return setString(j, k, s)
}

// intKeys are the keys whose values are whole numbers.
var intKeys = map[string]bool{"max-attempts": true, "catch-up-max": true, "limit": true}

var stringExample = map[string]string{
	"name": `"backup"`, "schedule": `"0 2 * * *"`, "tz": `"Europe/Berlin"`, "dir": `"/srv/app"`,
	"on-unknown": `"review"`, "notify": `"https://hooks.example.com/x"`, "ping": `"https://hc-ping.com/UUID"`,
	"overlap": `"skip"`,
}

func setString(j *Job, k, s string) string {
	switch k {
	case "name":
		if s == "" {
			return `name is empty: give one such as "backup" (letters, digits and . _ : @ / -)`
		}
		if err := once.ValidateTask(s); err != nil {
			return "job name: " + err.Error()
		}
		j.Name = s
	case "schedule":
		if strings.TrimSpace(s) == "" {
			return `schedule is empty: give 5 cron fields such as "0 2 * * *", @daily or @every 5m`
		}
		j.Schedule = strings.Join(strings.Fields(s), " ")
	case "tz":
		if s == "" {
			return `tz is empty: give a zone such as "Europe/Berlin", or leave tz out for the daemon's local zone`
		}
		j.TZ = s
	case "dir":
		if !strings.HasPrefix(s, "/") {
			return fmt.Sprintf("dir %q is not an absolute path: give one such as \"/srv/app\", or leave dir out for the daemon's", s)
		}
		j.Dir = s
	case "on-unknown":
		if _, err := once.ParsePolicy(s); err != nil {
			return fmt.Sprintf("on-unknown %q: use review, rerun or skip", s)
		}
		j.OnUnknown = s
	case "notify", "ping":
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || (u.Port() != "" && !store.IsPort(u.Port())) {
			return k + " is not an http or https URL: give one such as " + stringExample[k] // the URL itself may be a secret
		}
		if k == "notify" {
			j.Notify = s
		} else {
			j.Ping = s
		}
	case "overlap":
		switch s {
		case "skip", "buffer-one", "replace":
		default:
			return fmt.Sprintf("overlap %q: use skip (the default), buffer-one or replace", s)
		}
		j.Overlap = s
	}
	return ""
}

// durationValue reads a duration: a Go duration string ("90s", "1h30m"), optionally preceded by
// whole days or weeks ("3d", "1w2d", "1d12h").
func durationValue(k string, v any, lo, hi time.Duration, example string) (time.Duration, string) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Sprintf("%s must be a duration string such as %q", k, example)
	}
	bounds := fmt.Sprintf("between %s and %s", fmtDur(lo), fmtDur(hi))
	d, ok := parseDuration(s)
	switch {
	case !ok:
		return 0, fmt.Sprintf("%s %q is not a duration: write one such as %q (units ns us ms s m h d w)", k, s, example)
	case d < lo || d > hi:
		return 0, fmt.Sprintf("%s %q is out of range: give a duration %s", k, s, bounds)
	}
	return d, ""
}

// maxDuration is the longest time.Duration (about 292 years).
const maxDuration = time.Duration(1<<63 - 1)

// addSat is d + x (d ≥ 0), maxDuration when that is more than a duration holds.
func addSat(d, x time.Duration) time.Duration {
	if x > 0 && d > maxDuration-x {
		return maxDuration
	}
	return d + x
}

// parseDuration reads a duration for durationValue. Weeks and days past what a time.Duration
// holds read as maxDuration, out of every key's range, not wrapped around (30501w was 3d0h25m).
func parseDuration(s string) (time.Duration, bool) {
	rest := s
	var d time.Duration
	for _, u := range []struct {
		suffix byte
		unit   time.Duration
	}{{'w', 7 * day}, {'d', day}} {
		i := strings.IndexByte(rest, u.suffix)
		if i < 0 {
			continue
		}
		n, err := strconv.ParseUint(rest[:i], 10, 16)
		if err != nil || i == 0 || rest[0] == '+' {
			return 0, false
		}
		if n > uint64(maxDuration/u.unit) {
			d = maxDuration
		} else {
			d = addSat(d, time.Duration(n)*u.unit)
		}
		rest = rest[i+1:]
	}
	if rest != "" {
		if rest[0] == '+' || (rest[0] == '-' && d > 0) {
			return 0, false
		}
		x, err := time.ParseDuration(rest)
		if err != nil {
			return 0, false
		}
		d = addSat(d, x)
	} else if s == "" {
		return 0, false
	}
	return d, true
}

// fmtDur writes a bound the way people say it: 0, 1s, 1h, 7d.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= day && d%day == 0:
		return strconv.Itoa(int(d/day)) + "d"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}

func intValue(k string, v any, lo, hi int, example string) (int, string) {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case optText: // from a crontab's "# once:" options
		var err error
		if n, err = strconv.ParseInt(string(x), 10, 64); err != nil {
			return 0, fmt.Sprintf("%s %q is not a whole number: give one such as %s", k, x, example)
		}
		if d := strings.TrimLeft(string(x), "+-"); len(d) > 1 && d[0] == '0' {
			// As once run's flags and TOML: 010 is octal 8 to some readers and 10 to others.
			return 0, fmt.Sprintf("%s %q has a leading 0: write the number without it", k, x)
		}
	default:
		return 0, fmt.Sprintf("%s must be a whole number, such as %s", k, example)
	}
	if n < int64(lo) || n > int64(hi) {
		return 0, fmt.Sprintf("%s %d is out of range: give %d to %d", k, n, lo, hi)
	}
	return int(n), ""
}

func commandValue(v any) ([]string, string) {
	var argv []string
	switch x := v.(type) {
	case string:
		if strings.TrimSpace(x) == "" {
			return nil, `command is empty: give an argv such as ["/usr/local/bin/backup", "--full"], or a shell command line`
		}
		argv = []string{"sh", "-c", x}
	case []string:
		argv = x
	case []any:
		for i, a := range x {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Sprintf("command[%d] is not a string: write every argument in quotes", i)
			}
			argv = append(argv, s)
		}
		if len(argv) == 0 || argv[0] == "" {
			return nil, `command has no program: give an argv such as ["/usr/local/bin/backup", "--full"]`
		}
	default:
		return nil, `command must be an array of strings such as ["/usr/local/bin/backup", "--full"], or a string run by sh -c`
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Sprintf("command[%d] contains a NUL byte: remove it", i)
		}
	}
	return argv, ""
}

func envValue(v any) ([]string, string) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, `env must be a table such as env = { PGHOST = "db" }`
	}
	env := make([]string, 0, len(m))
	for k, x := range m {
		if msg := checkEnvName(k); msg != "" {
			return nil, msg
		}
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Sprintf("env %s must be a string: write it in quotes", k)
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Sprintf("env %s contains a NUL byte: remove it", k)
		}
		env = append(env, k+"="+s)
	}
	if len(env) == 0 {
		return nil, ""
	}
	sort.Strings(env) // names have no '=', so this sorts by name
	return env, ""
}

// checkEnvName: a POSIX shell name, not one of once's own.
func checkEnvName(k string) string {
	if k == "" {
		return "env has an empty variable name: give names such as PGHOST"
	}
	for i, r := range k {
		if r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return fmt.Sprintf("env variable name %q: use letters, digits and _ only, not starting with a digit", k)
	}
	if strings.HasPrefix(k, "ONCE_") {
		return fmt.Sprintf("env variable %s: names starting with ONCE_ are set by once for the command; choose another name", k)
	}
	return ""
}

// goFields names the Job fields of the duration keys, for Check's messages.
var goFields = map[string]string{"timeout": "Timeout", "ttl": "TTL", "grace": "Grace", "retry-backoff": "RetryBackoff",
	"catch-up": "CatchUp", "jitter": "Jitter"}

// Check holds a job that a program builds itself (package scheduler) to the bounds a jobs file's
// job is held to, a zero value standing for the default: the durations, MaxAttempts, CatchUpMax,
// OnUnknown, Overlap and Limit (CheckLimit). A job read from a file passes it by construction.
// Without it a misspelt OnUnknown failed every launch of the job, and a misspelt Overlap ran as
// skip.
func (j Job) Check() error {
	for _, k := range jobKeys {
		d, ok := durationKeys[k]
		if !ok {
			continue
		}
		if v := *d.field(&j); v != 0 && (v < d.min || v > d.max) {
			return fmt.Errorf("field Job.%s %s is out of range: give 0 (the default) or a duration between %s and %s",
				goFields[k], v, fmtDur(max(d.min, time.Nanosecond)), fmtDur(d.max))
		}
	}
	switch {
	case j.MaxAttempts < 0 || j.MaxAttempts > maxAttempts:
		return fmt.Errorf("field Job.MaxAttempts %d is out of range: give 0 (no limit) to %d", j.MaxAttempts, maxAttempts)
	case j.CatchUpMax < 0 || j.CatchUpMax > maxCatchUpMax:
		return fmt.Errorf("field Job.CatchUpMax %d is out of range: give 0 (the default, 1) to %d", j.CatchUpMax, maxCatchUpMax)
	}
	if j.OnUnknown != "" {
		if _, err := once.ParsePolicy(j.OnUnknown); err != nil {
			return fmt.Errorf("field Job.OnUnknown %q: use review (the default), rerun or skip", j.OnUnknown)
		}
	}
	switch j.Overlap {
	case "", "skip", "buffer-one", "replace":
	default:
		return fmt.Errorf("field Job.Overlap %q: use skip (the default), buffer-one or replace", j.Overlap)
	}
	if err := j.CheckJitter(); err != nil {
		return fmt.Errorf("field Job.Jitter: %w", err)
	}
	return j.CheckLimit()
}
