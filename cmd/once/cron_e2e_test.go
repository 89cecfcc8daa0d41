package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// debianCron is the daemon of Debian's cron package (scripts/testenv/cron.sh installs it as root).
const debianCron = "/usr/sbin/cron"

// TestUnderDebianCron runs the built binary from Debian's real cron daemon, as a crontab line calls
// it: cron's PATH (/usr/bin:/bin), no terminal, MAILTO set, and cron mailing whatever the job
// printed through /usr/sbin/sendmail — here a stub that keeps each mail as a file. A run that
// succeeds, one that is skipped and one that finds the task busy (exit 75, the default) send no
// mail; a failure and a slot that needs review send one each.
//
// The daemon runs in a private mount namespace that shows it only this test's crontab (the
// system's /etc/crontab, /etc/cron.d and spool are hidden), a fresh /run (its pid file, and no
// crond.reboot marker) and the sendmail stub over /usr/sbin. The lines are @reboot lines: cron runs
// them as it starts, exactly as it runs a `* * * * *` line at the next minute (same job
// environment, same mailer), so the test takes seconds instead of up to a minute.
func TestUnderDebianCron(t *testing.T) {
	t.Parallel()
	required := os.Getenv("ONCE_TEST_REQUIRE") == "all" || strings.Contains(os.Getenv("ONCE_TEST_REQUIRE"), "cron")
	if os.Geteuid() != 0 {
		t.Skip("runs Debian's cron daemon in a private mount namespace: needs root")
	}
	if _, err := os.Stat(debianCron); err != nil {
		msg := "Debian's cron is not installed: apt-get install --no-install-recommends cron (./scripts/test does it as root)"
		if required {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is missing (util-linux)")
	}
	e := newEnv(t)
	dir := t.TempDir()
	mail := filepath.Join(dir, "mail")
	if err := os.Mkdir(mail, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("sendmail", fmt.Sprintf("#!/bin/sh\nf=%s/$$\ncat > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n", mail), 0o755)
	write("empty", "", 0o644)

	// The ledger before cron starts: a succeeded slot (skip), a slot that needs review, a task held.
	if r := e.run("run", "--task", "cron-skip", "--slot", "s", "--", "true"); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	if r := e.run("run", "--task", "cron-review", "--slot", "s", "--max-attempts", "1", "--", "false"); r.code != 1 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	startOnce(t, e, t.TempDir(), "--task", "cron-busy")

	lines := map[string]string{
		"cron-ok":     "--per day -- true",
		"cron-skip":   "--slot s -- true",
		"cron-busy":   "-- true",
		"cron-fail":   "-- sh -c 'echo failing >&2; exit 3'",
		"cron-review": "--slot s --max-attempts 1 -- true",
	}
	tab := "MAILTO=root\nONCE_HOME=" + e.home + "\n"
	for task, rest := range lines {
		tab += fmt.Sprintf("@reboot %s run --task %s %s\n", bin, task, rest)
	}
	write("crontab", tab, 0o600)
	script := write("ns.sh", fmt.Sprintf(`set -e
d=%s
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=755 tmpfs /etc/cron.d
mount --bind $d/empty /etc/crontab
mount -t tmpfs -o mode=755 tmpfs /var/spool/cron
mkdir -m 1730 /var/spool/cron/crontabs
install -m 600 $d/crontab /var/spool/cron/crontabs/root
mkdir $d/ov
mount -t tmpfs -o mode=700 tmpfs $d/ov
mkdir $d/ov/upper $d/ov/work
cp $d/sendmail $d/ov/upper/sendmail
mount -t overlay overlay -o lowerdir=/usr/sbin,upperdir=$d/ov/upper,workdir=$d/ov/work /usr/sbin
exec %s -f
`, dir, debianCron), 0o700)

	c := exec.Command(unshare, "--mount", "--propagation", "private", "sh", script)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); <-exited })

	// Wait for every line's outcome in the ledger, then for cron's children (each waits for its
	// job's output and mails it) to be gone.
	want := map[string]string{"cron-ok": "succeeded", "cron-skip": "skipped", "cron-busy": "busy", "cron-fail": "failed", "cron-review": "review"}
	deadline := time.Now().Add(45 * time.Second)
	for task, state := range want {
		for !hasState(e, task, state) {
			select {
			case <-exited:
				t.Fatalf("cron exited: %s", out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("cron did not run %s to %s within 45s; cron said: %s", task, state, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for len(childrenOf(c.Process.Pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("cron's jobs did not end: %v", childrenOf(c.Process.Pid))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("cron ran the five lines and mailed in %s", time.Since(start).Round(time.Millisecond))

	mails := map[string]string{} // task → mail
	ents, err := os.ReadDir(mail)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(mail, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m := string(b)
		task := "?"
		for name := range lines {
			if strings.Contains(m, "--task "+name+" ") {
				task = name
			}
		}
		if _, dup := mails[task]; dup || task == "?" {
			t.Errorf("unexpected mail:\n%s", m)
		}
		mails[task] = m
	}
	for _, task := range []string{"cron-ok", "cron-skip", "cron-busy"} {
		if m, ok := mails[task]; ok {
			t.Errorf("%s sent a mail:\n%s", task, m)
		}
	}
	for task, wants := range map[string][]string{
		"cron-fail":   {"failing", "level=WARN msg=end", "state=failed exit_code=3", "X-Cron-Env: <PATH=/usr/bin:/bin>"},
		"cron-review": {"needs review", "once resolve --task cron-review --slot s --as failed"},
	} {
		m, ok := mails[task]
		if !ok {
			t.Errorf("%s sent no mail", task)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(m, w) {
				t.Errorf("%s's mail lacks %q:\n%s", task, w, m)
			}
		}
		if strings.Contains(m, "level=INFO") {
			t.Errorf("%s's mail has INFO lines:\n%s", task, m)
		}
	}
}

// hasState says whether task's history has an entry in state.
func hasState(e *env, task, state string) bool {
	for _, h := range e.history(task) {
		if h["state"] == state {
			return true
		}
	}
	return false
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so count from the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}
