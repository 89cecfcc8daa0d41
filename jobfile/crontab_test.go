package jobfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const goodCrontab = `# m h dom mon dow command
SHELL=/bin/bash
PATH=/usr/local/bin:/usr/bin:/bin
MAILTO=ops@example.com
CRON_TZ=Europe/Berlin

# once: name=backup timeout=1h on-unknown=rerun max-attempts=3
# once: notify="https://hooks.example.com/x" catch-up=6h catch-up-max=2 limit=2
0 2 * * * /usr/local/bin/backup --full >> /var/log/backup.log 2>&1
*/15 9-17 * * MON-FRI   cd /srv && ./poll.sh
@daily date +\%F > /tmp/today
GREETING = "hello world"
@hourly echo $GREETING
`

func TestParseCrontabGood(t *testing.T) {
	jobs, err := Parse("me.crontab", []byte(goodCrontab))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SHELL=/bin/bash"}
	sh := func(c string) []string { return []string{"/bin/bash", "-c", c} }
	want := []Job{
		{Name: "backup", Schedule: "0 2 * * *", TZ: "Europe/Berlin", Command: sh("/usr/local/bin/backup --full >> /var/log/backup.log 2>&1"),
			Env: env, Timeout: time.Hour, OnUnknown: "rerun", MaxAttempts: 3, Notify: "https://hooks.example.com/x",
			CatchUp: 6 * time.Hour, CatchUpMax: 2, Overlap: "skip", Limit: 2, Source: "me.crontab:9"},
		{Name: DeriveName("cd /srv && ./poll.sh"), Schedule: "*/15 9-17 * * MON-FRI", TZ: "Europe/Berlin", Command: sh("cd /srv && ./poll.sh"),
			Env: env, OnUnknown: "review", Overlap: "skip", Limit: 1, Source: "me.crontab:10"},
		{Name: DeriveName("date +%F > /tmp/today"), Schedule: "@daily", TZ: "Europe/Berlin", Command: sh("date +%F > /tmp/today"),
			Env: env, OnUnknown: "review", Overlap: "skip", Limit: 1, Source: "me.crontab:11"},
		{Name: DeriveName("echo $GREETING"), Schedule: "@hourly", TZ: "Europe/Berlin", Command: sh("echo $GREETING"),
			Env: []string{"GREETING=hello world", env[0], env[1]}, OnUnknown: "review", Overlap: "skip", Limit: 1, Source: "me.crontab:13"},
	}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("got\n%+v\nwant\n%+v", jobs, want)
	}
}

func TestDeriveName(t *testing.T) {
	for cmd, prefix := range map[string]string{
		"/usr/local/bin/backup --full": "backup-",
		"FOO=1 BAR=2 /bin/run.sh x":    "run.sh-",
		"cd /srv && make":              "cd-",
		"'my prog' x":                  "_my-",
		"FOO=1":                        "job-",
		"/":                            "job-",
		"ünïcode":                      "__n__code-",
		strings.Repeat("a", 100):       strings.Repeat("a", 48) + "-",
	} {
		n := DeriveName(cmd)
		if !strings.HasPrefix(n, prefix) || len(n) != len(prefix)+8 || DeriveName(cmd) != n {
			t.Errorf("DeriveName(%q) = %q, want %s + 8 hex digits", cmd, n, prefix)
		}
		if err := (Job{Name: n}); set(&err, "name", n) != "" {
			t.Errorf("DeriveName(%q) = %q is not a valid task name", cmd, n)
		}
	}
	if DeriveName("backup --full") == DeriveName("backup --fast") {
		t.Error("two commands, one name")
	}
	// The documented examples (docs/jobs-file.md): a name never changes once released.
	if n := DeriveName("/usr/local/bin/backup --full"); n != "backup-ad8c850f" {
		t.Error(n)
	}
	if n := DeriveName("FOO=1 /opt/run.sh"); n != "run.sh-cb38d3d3" {
		t.Error(n)
	}
}

func TestSplitCronLine(t *testing.T) {
	for _, tc := range []struct{ line, schedule, command string }{
		{"0 2 * * * /bin/x", "0 2 * * *", "/bin/x"},
		{"0 2 * * * /bin/x  a   b", "0 2 * * *", "/bin/x  a   b"},
		{"0\t2 *  * *\t/bin/x", "0 2 * * *", "/bin/x"},
		{"0 2 * * * x", "0 2 * * *", "x"},
		{"0 2 * * * 2>&1 x", "0 2 * * *", "2>&1 x"},
		{"*/2 * * * * * /bin/fast", "*/2 * * * * *", "/bin/fast"},
		{"0 0 2 * * 1-5 /bin/x", "0 0 2 * * 1-5", "/bin/x"},
		{"0 2 * * * * ", "0 2 * * *", "*"},
		{"@daily /bin/x y", "@daily", "/bin/x y"},
		{"@every 5m /bin/x", "@every 5m", "/bin/x"},
	} {
		s, c, msg := splitCronLine(tc.line)
		if s != tc.schedule || c != tc.command || msg != "" {
			t.Errorf("%q: got %q %q %q, want %q %q", tc.line, s, c, msg, tc.schedule, tc.command)
		}
	}
}

func TestParseCrontabBad(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"@reboot /bin/x\n", `c.crontab:1: @reboot is not supported: once daemon runs jobs on a schedule`},
		{"\n0 2 * * /bin/x\n", `c.crontab:2: want 5 time fields and a command`},
		{"0 2 * *\n", `c.crontab:1: want 5 time fields and a command: MIN HOUR DOM MON DOW COMMAND`},
		{"@daily\n", `c.crontab:1: no command after @daily: write @daily COMMAND`},
		{"@every\n", `c.crontab:1: want @every DURATION COMMAND`},
		{"@fortnightly /bin/x\n", `c.crontab:1: schedule "@fortnightly": unknown descriptor`},
		{"61 2 * * * /bin/x\n", `c.crontab:1: schedule "61 2 * * *": `},
		{"0 2 * * * date +%F\n", `c.crontab:1: the command has a % that is not escaped: cron would make it a newline and standard input; write \% for a literal %`},
		{"0 2 * * * mon -c x\n", `c.crontab:1: "mon" could be a day-of-week field after a seconds field or the command`},
		{"root /bin/x\n", `c.crontab:1: not a crontab line: want MIN HOUR DOM MON DOW COMMAND`},
		{"FOO BAR=1\n", `c.crontab:1: not a crontab line`},
		{"ONCE_TASK=x\n", `c.crontab:1: env variable ONCE_TASK: names starting with ONCE_ are set by once`},
		{"SHELL=bash\n", `c.crontab:1: SHELL "bash" is not an absolute path`},
		{"CRON_TZ=Mars/X\n\n0 2 * * * /bin/x\n", `c.crontab:1: tz "Mars/X": unknown time zone; use an IANA name such as Europe/Berlin (from CRON_TZ)`},
		{"# once: name=a\n\n0 2 * * * /bin/x\n", `c.crontab:1: a "# once:" line must be directly above its job line`},
		{"# once: name=a\n# other\n0 2 * * * /bin/x\n", `c.crontab:1: a "# once:" line must be directly above its job line`},
		{"# once: name=a\n", `c.crontab:1: a "# once:" line must be directly above its job line: add the job line`},
		{"# once: nme=a\n0 2 * * * /bin/x\n", `c.crontab:1: unknown key "nme" in "# once:" options: did you mean name?`},
		{"# once: schedule=x\n0 2 * * * /bin/x\n", `c.crontab:1: schedule cannot be a "# once:" option`},
		{"# once: name=a\n# once: name=b\n0 2 * * * /bin/x\n", `c.crontab:2: option name is given twice (also on line 1): keep one`},
		{"# once: name\n0 2 * * * /bin/x\n", `c.crontab:1: # once: "name" is not key=value`},
		{"# once: name=\"a\n0 2 * * * /bin/x\n", `c.crontab:1: # once: the value of name has no closing double quote`},
		{"# once: name=\"a\"b\n0 2 * * * /bin/x\n", `c.crontab:1: # once: the value of name goes on after its closing quote`},
		{"# once: name=a\"b\n0 2 * * * /bin/x\n", `c.crontab:1: # once: the value of name has a double quote inside`},
		{"# once: name=\"a b\"\n0 2 * * * /bin/x\n", `c.crontab:1: job name: task name "a b" has ' ' at byte 1`},
		{"# once: timeout=forever\n0 2 * * * /bin/x\n", `c.crontab:1: timeout "forever" is not a duration`},
		{"# once: max-attempts=many\n0 2 * * * /bin/x\n", `c.crontab:1: max-attempts "many" is not a whole number`},
		{"# once: limit=two\n0 2 * * * /bin/x\n", `c.crontab:1: limit "two" is not a whole number: give one such as 2`},
		{"# once: limit=010\n0 2 * * * /bin/x\n", `c.crontab:1: limit "010" has a leading 0: write the number without it`},
		{"\uFEFF0 2 * * * /bin/x\n", `c.crontab:1: the file starts with a byte-order mark (U+FEFF): save it as UTF-8 without BOM`},
		{"# once: limit=2 overlap=replace\n0 2 * * * /bin/x\n", `c.crontab:1: overlap = "replace" cannot be combined with limit = 2`},
		{"# once: overlap=allow\n0 2 * * * /bin/x\n", `c.crontab:1: overlap "allow": use skip (the default), buffer-one or replace`},
		{"0 2 * * * /bin/x\n0 3 * * * /bin/x\n", `c.crontab:2: job name "x-`},
		{"0 2 * * * /bin/\xff\n", `c.crontab:1: the line is not valid UTF-8`},
		{"0 2 * * * /bin/\x00\n", `c.crontab:1: the line contains a NUL byte`},
	} {
		_, err := Parse("c.crontab", []byte(tc.in))
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

func TestCrontabCRLFAndCase(t *testing.T) {
	jobs, err := Parse("c.crontab", []byte("# ONCE : name=a\r\n0 2 * * * /bin/x\r\n"))
	if err != nil || len(jobs) != 1 || jobs[0].Name != "a" || jobs[0].Command[2] != "/bin/x" {
		t.Fatalf("%+v %v", jobs, err)
	}
}
