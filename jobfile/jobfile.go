package jobfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Job is one scheduled job of a jobs file.
type Job struct {
	Name         string        // the task name (once.ValidateTask)
	Schedule     string        // cron text as written: 5 fields, 6 with leading seconds, @daily-style, @every D
	TZ           string        // IANA zone; "" = the daemon's local zone
	Command      []string      // argv; a string command `command = "…"` becomes ["sh", "-c", "…"]
	Dir          string        // working directory (absolute), "" = the daemon's
	Env          []string      // "K=V", sorted by key, keys validated; nil when none
	Timeout      time.Duration // 0 = none
	TTL          time.Duration // lease TTL; 0 = default (60s)
	Grace        time.Duration // 0 = default
	OnUnknown    string        // "review" (default) | "rerun" | "skip"  (once.ParsePolicy)
	MaxAttempts  int           // 0 = no limit
	RetryBackoff time.Duration // wait between attempts inside one slot; 0 = no retry inside the slot
	CatchUp      time.Duration // catch-up window; 0 = none
	CatchUpMax   int           // most missed slots run per catch-up; default 1 when CatchUp > 0
	Jitter       time.Duration // random delay up to this after the fire time; 0 = none
	Notify, Ping string        // http(s) URLs, "" = none
	Overlap      string        // "skip" (default) | "buffer-one" | "replace"
	Limit        int           // most slots of the job running at once in the fleet, each on a seat of its lease; 1 (default) = one at a time
	Source       string        // "file:line" where the job is defined, for messages
}

// CheckLimit checks the job's limit against its overlap: 0 or 1 (one at a time) to store.MaxLimit,
// and not with overlap = "replace" (which of the running slots would it stop?). The jobs file and
// a program's own jobs (package scheduler) are held to it alike.
func (j Job) CheckLimit() error {
	switch {
	case j.Limit < 0 || j.Limit > store.MaxLimit:
		return fmt.Errorf("limit %d is out of range: give 1 to %d", j.Limit, store.MaxLimit)
	case j.Limit >= 2 && j.Overlap == "replace":
		return fmt.Errorf("overlap = \"replace\" cannot be combined with limit = %d: replace stops the one running slot; use overlap = \"skip\" or \"buffer-one\" with a limit, or limit = 1", j.Limit)
	}
	return nil
}

// CheckJitter refuses a jitter longer than the shortest interval between two fires of the
// schedule: a slot would then fire after the next one, and the daemon, which fires the slots in
// the schedule's order, left the slots between without a run or a record, and recorded some
// missed that it ran too. The interval is read in the job's zone, so a daily job where clocks
// change has a day of 23 hours.
func (j Job) CheckJitter() error {
	if j.Jitter <= 0 {
		return nil
	}
	if gap := intervals.shortest(j.Schedule, j.TZ); gap > 0 && j.Jitter > gap {
		return fmt.Errorf("jitter %s is longer than the %s between two fires of schedule %q: slots would fire out of order, and some neither run nor be recorded; give a jitter of at most %s",
			fmtDur(j.Jitter), fmtDur(gap), j.Schedule, fmtDur(gap))
	}
	return nil
}

// intervals keeps shortestInterval's answers by schedule and zone for the process: a scan costs
// 0.4–1.5 ms, made at a file's read and again by scheduler.New (Check), at every reload, for each
// jittered job; a daemon's jobs share a few schedules.
var intervals = &intervalCache{m: map[[2]string]time.Duration{}}

type intervalCache struct {
	mu sync.Mutex
	m  map[[2]string]time.Duration
}

func (c *intervalCache) shortest(schedule, tz string) time.Duration {
	k := [2]string{schedule, tz}
	c.mu.Lock()
	d, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return d
	}
	d = shortestInterval(schedule, tz, time.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= 10000 { // bounded: a program that builds schedules of its own
		clear(c.m)
	}
	c.m[k] = d
	return d
}

// shortestInterval is the shortest time between two consecutive fires of schedule in zone tz,
// over the fires of the next 400 days (at most 1500 of them: a day of a job every minute, 0.4–1.5
// ms); 0 when it has no two or cannot be read (its own check says why).
func shortestInterval(schedule, tz string, from time.Time) time.Duration {
	sp, err := slot.New("", schedule, "", tz)
	if err != nil {
		return 0
	}
	var least time.Duration
	end := from.Add(400 * day)
	for prev, i := sp.Next(from), 0; prev.Value != "" && prev.Start.Before(end) && i < 1500; i++ {
		nx := sp.Next(prev.Start)
		if nx.Value == "" {
			break
		}
		if d := nx.Start.Sub(prev.Start); least == 0 || d < least {
			least = d
		}
		prev = nx
	}
	return least
}

// Spec is the job's schedule in its zone, as package slot reads it.
func (j Job) Spec() (slot.Spec, error) { return slot.New("", j.Schedule, "", j.TZ) }

// Error is a problem with a jobs file: where it is and what to fix. Every error of Load, Parse and
// ImportCrontab about their input is an *Error.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem is the file as a whole
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

func errorf(file string, line int, format string, args ...any) *Error {
	return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// MaxFileSize is the largest jobs file (or drop-in) read, in bytes.
const MaxFileSize = 4 << 20

// Parse reads one jobs file: TOML when name ends in .toml, a crontab when it ends in .crontab.
// name is used in errors and in each Job's Source. Names are not checked for duplicates across
// files (Load does that); within the file they are.
func Parse(name string, data []byte) ([]Job, error) {
	var jobs []Job
	var err error
	switch {
	case hasBOM(data):
		return nil, bomError(name)
	case strings.HasSuffix(name, ".toml"):
		jobs, err = parseTOML(name, data)
	case strings.HasSuffix(name, ".crontab"):
		jobs, err = parseCrontab(name, data)
	default:
		return nil, errorf(name, 0, "unknown kind of jobs file: name it *.toml (the jobs file format) or *.crontab (crontab lines)")
	}
	if err != nil {
		return nil, err
	}
	if err := checkDuplicates(jobs); err != nil {
		return nil, err
	}
	return jobs, nil
}

// Load reads the jobs file at path, or, when path is a directory, each of its *.toml and *.crontab
// files in name order (drop-ins). In a directory, names starting with "." are skipped (editors'
// and hidden files), other names are ignored, and a matching entry that is a symbolic link, a
// directory or not a regular file is refused. A job name may be defined only once in all files.
func Load(path string) ([]Job, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, errorf(path, 0, "cannot read the jobs file: %s", osReason(err))
	}
	if !fi.IsDir() {
		data, err := readFile(path, fi)
		if err != nil {
			return nil, err
		}
		return Parse(path, data)
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, errorf(path, 0, "cannot read the jobs directory: %s", osReason(err))
	}
	var all []Job
	for _, e := range entries {
		name := e.Name()
		if !IsDropIn(name) {
			continue
		}
		p := filepath.Join(path, name)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, errorf(p, 0, "cannot read the drop-in: %s", osReason(err))
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			return nil, errorf(p, 0, "is a symbolic link: copy the file into %s (drop-ins must be regular files)", path)
		case !fi.Mode().IsRegular():
			return nil, errorf(p, 0, "is not a regular file: drop-ins are *.toml and *.crontab files; rename or remove it")
		}
		data, err := readFile(p, fi)
		if err != nil {
			return nil, err
		}
		jobs, err := parseKind(p, data)
		if err != nil {
			return nil, err
		}
		all = append(all, jobs...)
	}
	if err := checkDuplicates(all); err != nil {
		return nil, err
	}
	return all, nil
}

// IsDropIn reports whether a directory entry named name is one of its jobs files (Load): a
// *.toml or *.crontab name not starting with ".".
func IsDropIn(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".toml") || strings.HasSuffix(name, ".crontab"))
}

// hasBOM is whether data starts with a byte-order mark, which Windows editors write and TOML and
// cron take for text ("invalid character at start of key", "not a crontab line").
func hasBOM(data []byte) bool { return strings.HasPrefix(string(data), "\uFEFF") }

func bomError(name string) error {
	return errorf(name, 1, "the file starts with a byte-order mark (U+FEFF): save it as UTF-8 without BOM")
}

func parseKind(name string, data []byte) ([]Job, error) {
	if hasBOM(data) {
		return nil, bomError(name)
	}
	if strings.HasSuffix(name, ".toml") {
		return parseTOML(name, data)
	}
	return parseCrontab(name, data)
}

func readFile(path string, fi os.FileInfo) ([]byte, error) {
	if !fi.Mode().IsRegular() {
		return nil, errorf(path, 0, "is not a regular file: give a jobs file or a directory of them")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, errorf(path, 0, "cannot read the jobs file: %s", osReason(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, errorf(path, 0, "cannot read the jobs file: %s", osReason(err))
	}
	if len(data) > MaxFileSize {
		return nil, errorf(path, 0, "is larger than %d MiB: split it into drop-ins in a directory", MaxFileSize>>20)
	}
	return data, nil
}

// osReason is the end of an *os.PathError's message (the path is already in the Error).
func osReason(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// checkDuplicates refuses a job name defined twice, naming both places.
func checkDuplicates(jobs []Job) error {
	seen := make(map[string]string, len(jobs))
	for _, j := range jobs {
		if first, ok := seen[j.Name]; ok {
			file, line := splitSource(j.Source)
			return errorf(file, line, "job name %q is already defined at %s: give each job its own name (in a crontab: a \"# once: name=…\" line above it)", j.Name, first)
		}
		seen[j.Name] = j.Source
	}
	return nil
}

func source(file string, line int) string { return fmt.Sprintf("%s:%d", file, line) }

func splitSource(s string) (string, int) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, 0
	}
	n := 0
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return s, 0
		}
		n = n*10 + int(c-'0')
	}
	return s[:i], n
}
