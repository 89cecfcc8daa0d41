package jobfile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// asTOML writes a Job back as a [[job]] table, every field given.
func asTOML(j Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[[job]]\nname = %s\nschedule = %s\ncommand = [", quote(j.Name), quote(j.Schedule))
	for i, a := range j.Command {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quote(a))
	}
	b.WriteString("]\nenv = {")
	for i, kv := range j.Env {
		k, v, _ := strings.Cut(kv, "=")
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s = %s", k, quote(v))
	}
	b.WriteString(" }\n")
	for k, s := range map[string]string{"tz": j.TZ, "dir": j.Dir, "notify": j.Notify, "ping": j.Ping} {
		if s != "" {
			fmt.Fprintf(&b, "%s = %s\n", k, quote(s))
		}
	}
	fmt.Fprintf(&b, "on-unknown = %q\noverlap = %q\nmax-attempts = %d\nlimit = %d\n", j.OnUnknown, j.Overlap, j.MaxAttempts, j.Limit)
	fmt.Fprintf(&b, "timeout = %q\ngrace = %q\nretry-backoff = %q\njitter = %q\n", j.Timeout, j.Grace, j.RetryBackoff, j.Jitter)
	if j.TTL > 0 {
		fmt.Fprintf(&b, "ttl = %q\n", j.TTL)
	}
	if j.CatchUp > 0 {
		fmt.Fprintf(&b, "catch-up = %q\ncatch-up-max = %d\n", j.CatchUp, j.CatchUpMax)
	}
	return b.String()
}

// checkParsed: an error is one *Error on one line; accepted jobs validate again when written out.
func checkParsed(t *testing.T, jobs []Job, err error) {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("error %q (%T): want a one-line *Error", err, err)
		}
		return
	}
	for _, j := range jobs {
		again, err := Parse("again.toml", []byte(asTOML(j)))
		if err != nil || len(again) != 1 {
			t.Fatalf("job %+v does not validate again: %v\n%s", j, err, asTOML(j))
		}
		again[0].Source = j.Source
		if !reflect.DeepEqual(again[0], j) {
			t.Fatalf("job %+v reads back as %+v", j, again[0])
		}
	}
}

func FuzzParseTOML(f *testing.F) {
	f.Add([]byte(goodTOML))
	f.Add([]byte(job("env = { A = \"1\" }", "catch-up = \"1d\"")))
	f.Add([]byte("job = [{ name = \"a\", schedule = \"@daily\", command = \"x\" }]\n"))
	f.Add([]byte("[[job]]\nname = \"a\"\n[job.env]\nA = \"b\"\n"))
	f.Add([]byte("[defaults]\nenv.A = \"1\"\n[[job]]\n"))
	f.Add([]byte("[[job]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := Parse("f.toml", data)
		checkParsed(t, jobs, err)
	})
}

func FuzzParseCrontab(f *testing.F) {
	f.Add([]byte(goodCrontab))
	f.Add([]byte("# once: name=\"a b\" ttl=5m\n0 2 * * * x\n"))
	f.Add([]byte("@every 5m /bin/x\n@reboot y\n"))
	f.Add([]byte("*/2 * * * * * /bin/fast\n"))
	f.Add([]byte("CRON_TZ=UTC\nSHELL=/bin/sh\nA='b'\n0 2 * * * date +\\%F\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := Parse("f.crontab", data)
		checkParsed(t, jobs, err)
	})
}

func FuzzImportCrontab(f *testing.F) {
	f.Add([]byte(goodCrontab))
	f.Add([]byte("0 2 * * * flock -n /tmp/l /bin/x >> log 2>&1\n"))
	f.Add([]byte("0 2 * * * flock -xn /tmp/l -c 'a && b'\n@daily run-one /bin/y\n"))
	f.Add([]byte("# once: name=q notify=\"https://h/x\"\n0 2 * * * printf '\\%s' \"\\\"\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		want, perr := Parse("f.crontab", data)
		text, jobs, err := importCrontab("f.crontab", data)
		if perr != nil {
			if err == nil || err.Error() != perr.Error() {
				t.Fatalf("Parse: %v; ImportCrontab: %v", perr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Parse accepts, ImportCrontab: %v", err)
		}
		got, err := Parse("f.toml", text)
		if err != nil {
			t.Fatalf("the import does not parse: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(withoutSource(got), withoutSource(jobs)) {
			t.Fatalf("the import reads as\n%+v\nwant\n%+v\n%s", got, jobs, text)
		}
		for i := range want { // the same jobs, but for a dropped lock wrapper
			w, g := want[i], got[i]
			w.Source, g.Source = "", ""
			if inner, _, _ := unwrapLock(w.Command[2]); inner != "" {
				w.Command = []string{w.Command[0], "-c", inner}
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("job %d: crontab %+v, import %+v", i, w, g)
			}
		}
	})
}
