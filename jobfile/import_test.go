package jobfile

import (
	"reflect"
	"strings"
	"testing"
)

// withoutSource drops what may differ between a crontab and its import.
func withoutSource(jobs []Job) []Job {
	out := make([]Job, len(jobs))
	for i, j := range jobs {
		j.Source = ""
		out[i] = j
	}
	return out
}

func TestImportCrontabRoundTrip(t *testing.T) {
	in := goodCrontab + "# once: name=\"with \\\"quotes\\\"\" ttl=2m grace=5s retry-backoff=1m jitter=10s ping=https://hc-ping.com/u dir=/srv overlap=replace\n" +
		"5 4 * * 0 printf '\\%s\\n' \"a\\\\b\" \t# tab and a comment\n"
	in = strings.Replace(in, `name="with \"quotes\""`, `name=with.quotes`, 1)
	text, err := ImportCrontab("me.crontab", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", text)
	want, err := Parse("me.crontab", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse("me.toml", text)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutSource(got), withoutSource(want)) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestImportCrontabUnwrap(t *testing.T) {
	for _, tc := range []struct{ cmd, inner, note string }{
		{"flock -n /tmp/b.lock /usr/bin/backup --full >> /var/log/b.log 2>&1", "/usr/bin/backup --full >> /var/log/b.log 2>&1", ""},
		{"/usr/bin/flock -xn /tmp/b.lock -c 'cd /srv && make'", "cd /srv && make", ""},
		{`flock -nx "/tmp/my lock" -c "backup \"x\""`, `backup "x"`, ""},
		{"flock --nonblock /tmp/l sh -c 'a; b'", "sh -c 'a; b'", ""},
		{"run-one /usr/bin/sync-mail", "/usr/bin/sync-mail", ""},
		{"flock -n /tmp/l cmd1 ; cmd2", "", "flock kept: the line has shell operators"},
		{"flock -n /tmp/l cmd || echo busy", "", "flock kept: the line has shell operators"},
		{"flock /tmp/l cmd", "", "flock kept: without -n it waits for the lock"},
		{"flock -w 10 /tmp/l cmd", "", "flock kept: it has the option -w"},
		{"flock -n /tmp/l -c \"echo $HOME\"", "", "flock kept: its -c command is expanded by the shell"},
		{"flock -n /tmp/l -c 'x' y", "", "flock kept: words follow its -c command"},
		{"flock -n /tmp/l", "", ""},
		{"flock -n 'unclosed", "", ""},
		{"/usr/bin/backup", "", ""},
	} {
		inner, _, note := unwrapLock(tc.cmd)
		if inner != tc.inner || !strings.HasPrefix(note, tc.note) {
			t.Errorf("%q: got %q, %q; want %q, %q", tc.cmd, inner, note, tc.inner, tc.note)
		}
	}
	in := "# once: name=b\n0 2 * * * flock -n /tmp/b.lock /usr/bin/backup\n0 3 * * * flock -n /tmp/l a; b\n"
	text, jobs, err := importCrontab("c.crontab", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# flock -n /tmp/b.lock dropped: once runs each slot once", `command = "/usr/bin/backup"`,
		"# flock kept: the line has shell operators", `command = "flock -n /tmp/l a; b"`,
		`name = "` + DeriveName("flock -n /tmp/l a; b") + `"`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the import lacks %q:\n%s", want, text)
		}
	}
	got, err := Parse("c.toml", text)
	if err != nil || !reflect.DeepEqual(withoutSource(got), withoutSource(jobs)) {
		t.Errorf("%+v %v\nwant %+v", got, err, jobs)
	}
}

func TestImportCrontabBad(t *testing.T) {
	_, err := ImportCrontab("c.crontab", []byte("@reboot x\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "c.crontab:1: @reboot is not supported") {
		t.Errorf("got %v", err)
	}
}
