package jobfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "20-web.toml", "[[job]]\nname = \"web\"\nschedule = \"@hourly\"\ncommand = \"true\"\n")
	write(t, dir, "10-db.crontab", "# once: name=db\n0 2 * * * /bin/true\n")
	write(t, dir, "30-more.toml", "[defaults]\ntz = \"UTC\"\n[[job]]\nname = \"more\"\nschedule = \"@daily\"\ncommand = [\"/bin/true\"]\n")
	write(t, dir, "README.md", "not a jobs file")
	write(t, dir, ".hidden.toml", "broken [")
	write(t, dir, "20-web.toml~", "broken [")
	write(t, dir, ".#20-web.toml", "broken [")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	jobs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names, sources []string
	for _, j := range jobs {
		names, sources = append(names, j.Name), append(sources, j.Source)
	}
	if strings.Join(names, " ") != "db web more" || sources[0] != filepath.Join(dir, "10-db.crontab")+":2" ||
		sources[1] != filepath.Join(dir, "20-web.toml")+":1" || jobs[2].TZ != "UTC" || jobs[1].TZ != "" {
		t.Errorf("%v %v %+v", names, sources, jobs)
	}

	// One file alone, by its path.
	one, err := Load(filepath.Join(dir, "20-web.toml"))
	if err != nil || len(one) != 1 || one[0].Name != "web" {
		t.Errorf("%+v %v", one, err)
	}
}

func TestLoadDuplicateAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	a := write(t, dir, "a.toml", "[[job]]\nname = \"x-1\"\nschedule = \"@hourly\"\ncommand = \"true\"\n")
	b := write(t, dir, "b.crontab", "# ok\n# once: name=x-1\n@daily /bin/true\n")
	_, err := Load(dir)
	var e *Error
	if !errors.As(err, &e) || e.File != b || e.Line != 3 ||
		e.Msg != `job name "x-1" is already defined at `+a+`:1: give each job its own name (in a crontab: a "# once: name=…" line above it)` {
		t.Errorf("got %#v", err)
	}
}

func TestLoadBad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.toml")
	if _, err := Load(missing); err == nil || err.Error() != missing+": cannot read the jobs file: no such file or directory" {
		t.Errorf("missing: %v", err)
	}
	wrong := write(t, dir, "jobs.yaml", "")
	if _, err := Load(wrong); err == nil || !strings.Contains(err.Error(), "name it *.toml (the jobs file format) or *.crontab") {
		t.Errorf("yaml: %v", err)
	}

	links := t.TempDir()
	real := write(t, dir, "real.toml", "")
	if err := os.Symlink(real, filepath.Join(links, "a.toml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(links); err == nil || !strings.Contains(err.Error(), "a.toml: is a symbolic link: copy the file into") {
		t.Errorf("symlink: %v", err)
	}

	dirs := t.TempDir()
	if err := os.Mkdir(filepath.Join(dirs, "d.toml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dirs); err == nil || !strings.Contains(err.Error(), "d.toml: is not a regular file") {
		t.Errorf("dir entry: %v", err)
	}

	big := t.TempDir()
	write(t, big, "big.toml", strings.Repeat("#\n", MaxFileSize/2+1))
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "big.toml: is larger than 4 MiB") {
		t.Errorf("big: %v", err)
	}

	bad := t.TempDir()
	p := write(t, bad, "x.toml", "[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"x\"\nttl = \"1y\"\n")
	if _, err := Load(bad); err == nil || err.Error() != p+`:5: ttl "1y" is not a duration: write one such as "2m" (units ns us ms s m h d w)` {
		t.Errorf("bad: %v", err)
	}
}

func TestLoadEmptyDir(t *testing.T) {
	jobs, err := Load(t.TempDir())
	if err != nil || len(jobs) != 0 {
		t.Errorf("%v %v", jobs, err)
	}
}
