package jobfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const goodTOML = `# a jobs file
[defaults]
tz = "UTC"
timeout = "2h"
env = { PGHOST = "db", LANG = "C" }

[[job]]
name = "backup"
schedule = "0 2 * * *"
command = ["/usr/local/bin/backup", "--full"]
timeout = "1h"
overlap = "skip"
env = { PGHOST = "db2" }

[[job]]
name = "report"
schedule = "@daily"
tz = "Europe/Berlin"
command = "report --all > /tmp/r.txt"
dir = "/srv/app"
ttl = "2m"
grace = "30s"
on-unknown = "rerun"
max-attempts = 3
retry-backoff = "1m"
catch-up = "1d12h"
jitter = "30s"
notify = "https://hooks.example.com/x"
ping = "https://hc-ping.com/uuid"
overlap = "buffer-one"
limit = 3

[[job]]
name = "sweep"
schedule = "*/5 * * * *"
command = ["/bin/sweep"]
catch-up = "1h"
catch-up-max = 12
overlap = "replace"
`

func TestParseTOMLGood(t *testing.T) {
	jobs, err := Parse("jobs.toml", []byte(goodTOML))
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{Name: "backup", Schedule: "0 2 * * *", TZ: "UTC", Command: []string{"/usr/local/bin/backup", "--full"},
			Env: []string{"LANG=C", "PGHOST=db2"}, Timeout: time.Hour, OnUnknown: "review", Overlap: "skip", Limit: 1, Source: "jobs.toml:7"},
		{Name: "report", Schedule: "@daily", TZ: "Europe/Berlin", Command: []string{"sh", "-c", "report --all > /tmp/r.txt"},
			Dir: "/srv/app", Env: []string{"LANG=C", "PGHOST=db"}, Timeout: 2 * time.Hour, TTL: 2 * time.Minute, Grace: 30 * time.Second,
			OnUnknown: "rerun", MaxAttempts: 3, RetryBackoff: time.Minute, CatchUp: 36 * time.Hour, CatchUpMax: 1,
			Jitter: 30 * time.Second, Notify: "https://hooks.example.com/x", Ping: "https://hc-ping.com/uuid", Overlap: "buffer-one",
			Limit: 3, Source: "jobs.toml:15"},
		{Name: "sweep", Schedule: "*/5 * * * *", TZ: "UTC", Command: []string{"/bin/sweep"}, Env: []string{"LANG=C", "PGHOST=db"},
			Timeout: 2 * time.Hour, OnUnknown: "review", CatchUp: time.Hour, CatchUpMax: 12, Overlap: "replace", Limit: 1, Source: "jobs.toml:33"},
	}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("got\n%+v\nwant\n%+v", jobs, want)
	}
	for _, j := range jobs {
		if _, err := j.Spec(); err != nil {
			t.Errorf("%s: Spec: %v", j.Name, err)
		}
	}
}

func TestParseTOMLEmpty(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "[defaults]\ntz = \"UTC\"\n"} {
		jobs, err := Parse("x.toml", []byte(in))
		if err != nil || len(jobs) != 0 {
			t.Errorf("%q: %v, %v", in, jobs, err)
		}
	}
}

// job is a valid [[job]] table with the lines given after its three required keys.
func job(extra ...string) string {
	return "[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n" + strings.Join(extra, "\n") + "\n"
}

func TestParseTOMLBad(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[[job]\n", `x.toml:1: TOML syntax: `},
		{"[[job]]\nname = \"a\"\nname = \"b\"\n", `x.toml:3: TOML syntax: `},
		{job("timout = \"1h\""), `x.toml:5: unknown key "timout" in [[job]]: did you mean timeout?`},
		{job("on_unknown = \"rerun\""), `x.toml:5: unknown key "on_unknown" in [[job]]: did you mean on-unknown?`},
		{job("zzz = 1"), `x.toml:5: unknown key "zzz" in [[job]]: use one of name, schedule`},
		{"[[job]]\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n", `x.toml:1: job has no name: add name = "backup"`},
		{"[[job]]\nname = \"a\"\ncommand = \"true\"\n", `x.toml:1: job has no schedule: add schedule = "0 2 * * *"`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\n", `x.toml:1: job has no command: add command = [`},
		{"\n[[job]]\nname = \"a b\"\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n", `x.toml:3: job name: task name "a b" has ' ' at byte 1: use only ASCII letters`},
		{"[[job]]\nname = \"\"\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n", `x.toml:2: name is empty: give one such as "backup"`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * *\"\ncommand = \"true\"\n", `x.toml:3: schedule "0 2 * *": want 5 fields`},
		{"[[job]]\nname = \"a\"\nschedule = \"@reboot\"\ncommand = \"true\"\n", `x.toml:3: schedule "@reboot": unknown descriptor`},
		{job("tz = \"Mars/Olympus\""), `x.toml:5: tz "Mars/Olympus": unknown time zone; use an IANA name such as Europe/Berlin`},
		{"[defaults]\ntz = \"Nowhere\"\n" + job(), `x.toml:2: tz "Nowhere": unknown time zone; use an IANA name such as Europe/Berlin (in [defaults])`},
		{"[defaults]\ncatch-up-max = 2\n" + job(), `x.toml:2: catch-up-max needs a catch-up window: add catch-up = "6h" (or remove catch-up-max) (from [defaults])`},
		{"[defaults]\ntz = \"Nowhere\"\n" + job("tz = \"UTC\""), `x.toml:2: tz "Nowhere": unknown time zone; use an IANA name such as Europe/Berlin (in [defaults])`},
		{"[defaults]\nenv = \"A=1\"\n" + job("env = { B = \"2\" }"), `x.toml:2: env must be a table such as env = { PGHOST = "db" } (in [defaults])`},
		{"[defaults]\ncatch-up-max = 0\n", `x.toml:2: catch-up-max 0 is out of range: give 1 to 10000 (in [defaults])`},
		{job("timeout = \"-5s\""), `x.toml:5: timeout "-5s" is out of range: give a duration between 0 and 7d`},
		// Weeks or days past what a duration holds wrapped around: 30501w read as 3d0h25m.
		{job("timeout = \"30501w\""), `x.toml:5: timeout "30501w" is out of range: give a duration between 0 and 7d`},
		{job("catch-up = \"30501w\""), `x.toml:5: catch-up "30501w" is out of range: give a duration between 0 and 3660d`},
		{job("timeout = \"15250w7d\""), `x.toml:5: timeout "15250w7d" is out of range`},
		{job("timeout = \"15250w2562047h\""), `x.toml:5: timeout "15250w2562047h" is out of range`},
		{job("timeout = \"soon\""), `x.toml:5: timeout "soon" is not a duration: write one such as "1h"`},
		{job("timeout = 90"), `x.toml:5: timeout must be a duration string such as "1h"`},
		{job("ttl = \"48h\""), `x.toml:5: ttl "48h" is out of range: give a duration between 1s and 1d`},
		{job("ttl = \"0s\""), `x.toml:5: ttl "0s" is out of range: give a duration between 1s and 1d`},
		{job("grace = \"2h\""), `x.toml:5: grace "2h" is out of range: give a duration between 0 and 1h`},
		{job("jitter = \"2d\""), `x.toml:5: jitter "2d" is out of range`},
		{job("retry-backoff = \"500ms\""), `x.toml:5: retry-backoff "500ms" is out of range: give a duration between 1s and 1d`},
		{job("retry-backoff = \"1ns\""), `x.toml:5: retry-backoff "1ns" is out of range`},
		{"\uFEFF" + job(), `x.toml:1: the file starts with a byte-order mark (U+FEFF): save it as UTF-8 without BOM`},
		{job("on-unknown = \"ask\""), `x.toml:5: on-unknown "ask": use review, rerun or skip`},
		{job("overlap = \"forbid\""), `x.toml:5: overlap "forbid": use skip (the default), buffer-one or replace`},
		{job("limit = 0"), `x.toml:5: limit 0 is out of range: give 1 to 1000`},
		{job("limit = 1001"), `x.toml:5: limit 1001 is out of range: give 1 to 1000`},
		{job("limit = \"2\""), `x.toml:5: limit must be a whole number, such as 2`},
		{job("overlap = \"replace\"", "limit = 2"), `x.toml:6: overlap = "replace" cannot be combined with limit = 2: replace stops the one running slot`},
		{"[defaults]\nlimit = 4\n" + job("overlap = \"replace\""), `x.toml:7: overlap = "replace" cannot be combined with limit = 4`},
		{job("max-attempts = -1"), `x.toml:5: max-attempts -1 is out of range: give 0 to 1000`},
		{job("max-attempts = \"3\""), `x.toml:5: max-attempts must be a whole number, such as 0 (no limit)`},
		{job("catch-up-max = 3"), `x.toml:5: catch-up-max needs a catch-up window: add catch-up = "6h"`},
		{job("catch-up = \"1h\"", "catch-up-max = 0"), `x.toml:6: catch-up-max 0 is out of range: give 1 to 10000`},
		{job("dir = \"srv\""), `x.toml:5: dir "srv" is not an absolute path`},
		{job("notify = \"ftp://x/y\""), `x.toml:5: notify is not an http or https URL: give one such as`},
		{job("ping = \"hc-ping.com/secret\""), `x.toml:5: ping is not an http or https URL`},
		{job("env = { \"A B\" = \"x\" }"), `x.toml:5: env variable name "A B": use letters, digits and _ only`},
		{job("env = { ONCE_TASK = \"x\" }"), `x.toml:5: env variable ONCE_TASK: names starting with ONCE_ are set by once`},
		{job("env = { A = 1 }"), `x.toml:5: env A must be a string: write it in quotes`},
		{job("env = \"A=1\""), `x.toml:5: env must be a table such as env = { PGHOST = "db" }`},
		{job("[job.env]", "A = 1"), `x.toml:5: env A must be a string`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\ncommand = []\n", `x.toml:4: command has no program`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\ncommand = [\"a\", 1]\n", `x.toml:4: command[1] is not a string`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\ncommand = \"  \"\n", `x.toml:4: command is empty`},
		{"[[job]]\nname = \"a\"\nschedule = \"0 2 * * *\"\ncommand = \"a\\u0000b\"\n", `x.toml:4: command[2] contains a NUL byte`},
		{"[job]\nname = \"a\"\n", `x.toml:1: write each job as a [[job]] table (double brackets)`},
		{"[jobs]\nname = \"a\"\n", `x.toml:1: unknown table "jobs": did you mean [[job]] or [defaults]?`},
		{"title = \"x\"\n", `x.toml:1: unknown key "title" at the top level`},
		{"defaults = 1\n", `x.toml:1: defaults must be a table`},
		{"[defaults]\nname = \"x\"\n", `x.toml:2: name cannot be in [defaults]: give it in each [[job]]`},
		{"[defaults]\ntimeot = \"1h\"\n", `x.toml:2: unknown key "timeot" in [defaults]: did you mean timeout?`},
		{job() + job(), `x.toml:6: job name "a" is already defined at x.toml:1: give each job its own name`},
		{"job = [{ name = \"a\", schedule = \"0 2 * * *\", command = \"x\", bad = 1 }]\n", `x.toml:1: unknown key "bad" in [[job]]`},
		{"job = [1]\n", `x.toml:1: job 1 is not a table`},
	} {
		_, err := Parse("x.toml", []byte(tc.in))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: got %v (%T), want an *Error", tc.in, err, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\n got %s\nwant %s…", tc.in, err, tc.want)
		}
	}
}

func TestParseUnknownKind(t *testing.T) {
	_, err := Parse("jobs.yaml", nil)
	if err == nil || err.Error() != "jobs.yaml: unknown kind of jobs file: name it *.toml (the jobs file format) or *.crontab (crontab lines)" {
		t.Errorf("got %v", err)
	}
}

// TestSecondsAndEvery: a leading seconds field and @every, when package slot accepts them.
func TestSecondsAndEvery(t *testing.T) {
	if _, err := (Job{Schedule: "*/2 * * * * *"}).Spec(); err != nil {
		t.Skipf("package slot has no seconds field yet: %v", err)
	}
	jobs, err := Parse("x.toml", []byte(`[[job]]
name = "fast"
schedule = "*/2 * * * * *"
command = "true"
[[job]]
name = "every"
schedule = "@every 90s"
command = "true"
`))
	if err != nil || len(jobs) != 2 {
		t.Fatal(jobs, err)
	}
	jobs, err = Parse("x.crontab", []byte("*/2 * * * * * /bin/fast\n@every 90s /bin/every\n"))
	if err != nil || len(jobs) != 2 || jobs[0].Schedule != "*/2 * * * * *" || jobs[0].Command[2] != "/bin/fast" ||
		jobs[1].Schedule != "@every 90s" || jobs[1].Command[2] != "/bin/every" {
		t.Fatalf("%+v %v", jobs, err)
	}
}

// A jitter longer than the schedule's interval fired slots out of order: the daemon left slots
// between without a run or a record (a */2 s schedule with jitter 20s).
func TestJitterLongerThanInterval(t *testing.T) {
	for _, tc := range []struct{ schedule, jitter, want string }{
		{"*/2 * * * * *", "20s", `x.toml:5: jitter 20s is longer than the 2s between two fires of schedule "*/2 * * * * *"`},
		{"@hourly", "90m", `x.toml:5: jitter 90m is longer than the 1h between two fires of schedule "@hourly"`},
		{"0 0,1 * * *", "2h", `x.toml:5: jitter 2h is longer than the 1h between two fires`},
	} {
		in := "[[job]]\nname = \"a\"\nschedule = \"" + tc.schedule + "\"\ncommand = \"true\"\njitter = \"" + tc.jitter + "\"\n"
		if _, err := Parse("x.toml", []byte(in)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s jitter %s: got %v, want %s…", tc.schedule, tc.jitter, err, tc.want)
		}
	}
	for _, tc := range []struct{ schedule, jitter string }{{"@daily", "1d"}, {"@hourly", "1h"}, {"*/2 * * * * *", "2s"}, {"0 9 * * MON-FRI", "1d"}} {
		in := "[[job]]\nname = \"a\"\nschedule = \"" + tc.schedule + "\"\ncommand = \"true\"\njitter = \"" + tc.jitter + "\"\n"
		if _, err := Parse("x.toml", []byte(in)); err != nil {
			t.Errorf("%s jitter %s: %v", tc.schedule, tc.jitter, err)
		}
	}
	// Where clocks change, a daily job's shortest day has 23 hours.
	in := "[[job]]\nname = \"a\"\nschedule = \"@daily\"\ntz = \"Europe/Berlin\"\ncommand = \"true\"\njitter = \"1d\"\n"
	if _, err := Parse("x.toml", []byte(in)); err == nil || !strings.Contains(err.Error(), "longer than the 23h between two fires") {
		t.Errorf("@daily in Europe/Berlin, jitter 1d: got %v, want the 23h day refused", err)
	}
	if err := (Job{Schedule: "@every 10s", Jitter: time.Minute}).Check(); err == nil {
		t.Error("Check took a jitter of 1m on @every 10s")
	}
}
