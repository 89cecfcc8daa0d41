package main

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// thisUser is the user a process of this test's runs as, as once names it: its name, or its
// uid's number. Both are taken: the binary under test is built without cgo (it reads /etc/passwd)
// unless with -race, and this test's process may find the name through NSS (LDAP, sssd) where the
// binary finds none.
func thisUser(t *testing.T) []string {
	t.Helper()
	uid := strconv.Itoa(os.Geteuid())
	if u, err := user.LookupId(uid); err == nil && u.Username != uid {
		return []string{u.Username, uid}
	}
	return []string{uid}
}

// TestHistoryShowsWhoRan: "always show who ran what". A run's holder is USER@HOST:PID — history,
// status and the history's JSON show who ran it — and alice(USER) when alice ran it with sudo; a
// decision without --by names the user too. A holder given (--holder, ONCE_HOLDER) is kept as given.
func TestHistoryShowsWhoRan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	host, _ := os.Hostname()
	names := thisUser(t)
	holderOf := func(task string) string {
		t.Helper()
		h := e.history(task)
		if len(h) == 0 {
			t.Fatalf("task %s: no history", task)
		}
		s, _ := h[0]["holder"].(string)
		return s
	}
	if r := e.run("run", "--task", "who-a", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	me := ""
	for _, n := range names {
		want := regexp.MustCompile("^" + regexp.QuoteMeta(n+"@"+host+":") + "[1-9][0-9]*$")
		if h := holderOf("who-a"); want.MatchString(h) {
			me = n
		}
	}
	if me == "" {
		t.Fatalf("holder %q, want one of %q @%s:PID", holderOf("who-a"), names, host)
	}
	if r := e.run("history", "--task", "who-a"); !strings.Contains(r.stdout, me+"@"+host+":") {
		t.Errorf("once history does not show %s@%s:\n%s", me, host, r.stdout)
	}

	// Under sudo: the person beside the effective user.
	sudo := *e
	sudo.vars = append(append([]string{}, e.vars...), "SUDO_USER=alice-e2e")
	if r := sudo.run("run", "--task", "who-sudo", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	if h, w := holderOf("who-sudo"), "alice-e2e("+me+")@"+host+":"; !strings.HasPrefix(h, w) {
		t.Errorf("under sudo: holder %q, want %s…", h, w)
	}

	// Given: kept as given.
	if r := e.run("run", "--task", "who-given", "--holder", "pod-7", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	given := *e
	given.vars = append(append([]string{}, e.vars...), "ONCE_HOLDER=web9:12")
	if r := given.run("run", "--task", "who-given", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	var got []string
	for _, x := range e.history("who-given") {
		got = append(got, x["holder"].(string))
	}
	if strings.Join(got, " ") != "web9:12 pod-7" {
		t.Errorf("given holders: %q, want web9:12 and pod-7 as given", got)
	}

	// A run in progress: once status shows its holder, with this once's pid.
	dir := t.TempDir()
	flag := filepath.Join(dir, "running")
	c := e.cmd(context.Background(), "run", "--task", "who-live", "--", "sh", "-c", "touch "+flag+"; while [ -e "+flag+" ]; do sleep 0.05; done")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(flag); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not start")
		}
	}
	status := e.run("status")
	os.Remove(flag)
	if err := c.Wait(); err != nil {
		t.Fatalf("the run: %v", err)
	}
	if w := me + "@" + host + ":" + strconv.Itoa(c.Process.Pid); !strings.Contains(status.stdout, w) {
		t.Errorf("once status does not show %s:\n%s", w, status.stdout)
	}

	// A decision without --by: the user, alice(USER) under sudo.
	for _, x := range []struct {
		e  *env
		by string
	}{{e, me + "@" + host}, {&sudo, "alice-e2e(" + me + ")@" + host}} {
		task := "who-review-" + strconv.Itoa(len(x.by))
		if r := x.e.run("run", "--task", task, "--slot", "s", "--max-attempts", "1", "--", "false"); r.code != 1 {
			t.Fatalf("run: %d %s", r.code, r.stderr)
		}
		if r := x.e.run("resolve", "--task", task, "--slot", "s", "--as", "succeeded", "--note", "checked"); r.code != 0 {
			t.Fatalf("resolve: %d %s", r.code, r.stderr)
		}
		res, _ := e.history(task)[0]["resolution"].(map[string]any)
		if res["by"] != x.by {
			t.Errorf("resolved by %v, want %q", res["by"], x.by)
		}
	}
}

// TestHolderOfAUidWithoutAName: a container's --user 54321, or a crontab of a uid deleted from
// /etc/passwd, is named by its number (root only: the test runs once as that uid).
func TestHolderOfAUidWithoutAName(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("runs once as another uid: root only")
	}
	const uid = 54321
	if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		t.Skipf("uid %d has a name here", uid)
	}
	e := newEnv(t)
	asNobody(t, e) // opens the binary's directory to other users
	e.nobody = false
	for _, p := range []string{filepath.Dir(e.home), filepath.Dir(filepath.Dir(e.home))} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(e.home, uid, uid); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := e.cmd(ctx, args...)
		c.Env = append(c.Env, "HOME="+e.home)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		return collect(t, c)
	}
	if r := run("run", "--task", "who-uid", "--", "true"); r.code != 0 {
		t.Fatalf("run as uid %d: %d %s", uid, r.code, r.stderr)
	}
	host, _ := os.Hostname()
	if r := run("history", "--task", "who-uid"); !strings.Contains(r.stdout, strconv.Itoa(uid)+"@"+host+":") {
		t.Errorf("history does not show %d@%s: (%d)\n%s%s", uid, host, r.code, r.stdout, r.stderr)
	}
}

// TestHolderOnAHostNameTheStoreRefuses: the kernel takes any 64 bytes as the host name
// (/proc/sys/kernel/hostname), and a holder with a control character or invalid UTF-8 is refused
// by every store. A run on such a host (its own UTS namespace here) still runs and is recorded,
// the name's odd bytes written as %XX; it was refused with a message about Options.Holder.
func TestHolderOnAHostNameTheStoreRefuses(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) for a UTS namespace")
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, unshare, "--uts", "sh", "-c",
		`printf 'web\001\377x' > /proc/sys/kernel/hostname && exec "$@"`, "sh", e.bin, "run", "--task", "oddhost", "--", "true")
	c.Env = e.vars
	if r := collect(t, c); r.code != 0 {
		t.Fatalf("once run on host \"web\\x01\\xffx\": exit %d: %s", r.code, r.stderr)
	}
	h := e.history("oddhost")
	if len(h) != 1 || h[0]["state"] != "succeeded" {
		t.Fatalf("history %v", h)
	}
	if holder, _ := h[0]["holder"].(string); !strings.Contains(holder, "@web%01%FFx:") {
		t.Errorf("holder %q, want USER@web%%01%%FFx:PID", holder)
	}
}
