package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsCronLine finds the housekeeping commands the docs give for a crontab: a line such as
// `30 3 * * * /usr/bin/once prune …`, and `once keys forget …` "from cron".
var docsCronLine = regexp.MustCompile("(?m)[0-9*/,-]+ [0-9*/,-]+ \\* \\* \\* /usr/bin/(once (?:prune|keys forget)[^`\\n]*)|`(once keys forget [^`]*)` from cron")

// TestDocsCronHousekeepingSilent pastes the docs' crontab lines for prune and keys forget as cron
// runs them (stdout and stderr pipes, which cron mails when anything comes out): on a healthy
// ledger each exits 0 and prints nothing. `once prune --older-than 90d` printed "removed 0
// attempts and 0 events older than …", a mail every night.
func TestDocsCronHousekeepingSilent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "docs-cron", "--per", "day", "--", "true"); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	if r := e.run("keys", "claim", "--scope", "http", "k1"); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	found := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docsCronLine.FindAllStringSubmatch(string(b), -1) {
			line := m[1] + m[2]
			if found[line] {
				continue
			}
			found[line] = true
			args := strings.Fields(line)[1:]
			r := e.run(args...)
			if r.code != 0 || r.stdout != "" || r.stderr != "" {
				t.Errorf("%s: the crontab line %q: exit %d, stdout %q, stderr %q; want 0 and nothing for cron to mail", filepath.Base(f), line, r.code, r.stdout, r.stderr)
			}
		}
	}
	for _, want := range []string{"once prune", "once keys forget"} {
		n := 0
		for line := range found {
			if strings.HasPrefix(line, want) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no crontab line of %s found in the docs (%v): the pattern is out of date", want, found)
		}
	}
	t.Logf("crontab lines tried: %v", found)
}
