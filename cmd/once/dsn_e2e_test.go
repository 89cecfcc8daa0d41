package main

// Issue 11, items 2, 3 (environment), 7 and 12 through the real binary: strict DSNs on every store,
// ONCE_STORE set but empty, passwords kept out of messages, argv and the job's environment
// (--store-password-file), webhook URLs redacted, and one logger.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secretOf is the password in dsn's user info, or "".
func secretOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

// withQuery appends a raw query to dsn.
func withQuery(dsn, raw string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + raw
	}
	return dsn + "?" + raw
}

// checkRefused: exit 64, one line naming what, no secret, nothing run.
func checkRefused(t *testing.T, r result, what, secret, marker string) {
	t.Helper()
	line := strings.TrimSpace(r.stderr)
	if r.code != 64 || strings.Count(line, "\n") != 0 || !strings.Contains(line, what) {
		t.Errorf("exit %d, want 64 and one line naming %s: %q", r.code, what, r.stderr)
	}
	if secret != "" && strings.Contains(r.stderr+r.stdout, secret) {
		t.Errorf("the password is in the output: %q", r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the command ran: %q", r.stderr)
	}
}

// Item 2: a DSN that does not parse strictly exits 64 with one line naming the parameter, on every
// store, and runs nothing. Team A's and team B's malformed prefixes used to fall back to the
// default prefix, so team B's job was skipped as "already succeeded".
func TestDSNStrictOnEveryStore(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			base, secret := b.dsn, secretOf(b.dsn)
			if secret == "" && (b.name == "redis" || b.name == "etcd") { // no password on the test server: add one to be hidden
				base = strings.Replace(base, "://", "://root:s3cr3tpw@", 1)
				secret = "s3cr3tpw"
			}
			e := newEnv(t)
			marker := filepath.Join(t.TempDir(), "ran")
			for _, c := range []struct{ query, names string }{
				{"prefix=teamA;x", `"prefix"`},
				{"prefix=teamb;x", `"prefix"`},
				{"prefix=a%zz", `"prefix"`},
				{"prefix=", `"prefix"`},
				{"prefix=a&prefix=b", `"prefix"`},
				{"prefix=Team-B", `"prefix"`},
				{"prefx=teamb", `"prefx"`},
				{"prefix=teamb&", `'&'`},
			} {
				dsn := withQuery(base, c.query)
				r := e.run("run", "--task", "dsn", "--slot", "s1", "--store", dsn, "--", "sh", "-c", "echo x >> "+marker)
				checkRefused(t, r, c.names, secret, marker)
			}
			// The same through ONCE_STORE, as cron would give it.
			env := newEnv(t)
			env.vars = append(env.vars, "ONCE_STORE="+withQuery(base, "prefix=teamB;x"))
			checkRefused(t, env.run("run", "--task", "dsn", "--", "sh", "-c", "echo x >> "+marker), `"prefix"`, secret, marker)
			checkRefused(t, env.run("status"), `"prefix"`, secret, marker)
			// A space at the end (a crontab line, a unit's Environment=) or before the query would
			// be part of the database's or file's name: another ledger.
			sp := newEnv(t)
			sp.vars = append(sp.vars, "ONCE_STORE="+base+" ")
			checkRefused(t, sp.run("run", "--task", "dsn", "--", "sh", "-c", "echo x >> "+marker), "ends with whitespace", secret, marker)
			checkRefused(t, sp.run("status"), "ends with whitespace", secret, marker)
			checkRefused(t, e.run("run", "--task", "dsn", "--store", "\u00a0"+base, "--", "sh", "-c", "echo x >> "+marker), "starts with whitespace", secret, marker)
		})
	}
}

// TestSQLiteDSNWithSpaceIsAnotherLedgerNoMore: ONCE_STORE="sqlite:///srv/once/once.db " made a new
// ledger, "once.db " next to the real one, where every slot already done ran again. It is 64 now,
// and no file is made.
func TestSQLiteDSNWithSpaceIsAnotherLedgerNoMore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	dsn := "sqlite://" + filepath.Join(dir, "once.db")
	marker := filepath.Join(t.TempDir(), "ran")
	e := newEnv(t)
	if r := e.run("run", "--task", "pay", "--slot", "s1", "--store", dsn, "--", "true"); r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	for _, bad := range []string{dsn + " ", dsn + " ?busy_timeout=5s", dsn + "\u3000"} {
		env := newEnv(t)
		env.vars = append(env.vars, "ONCE_STORE="+bad)
		checkRefused(t, env.run("run", "--task", "pay", "--slot", "s1", "--", "sh", "-c", "echo x >> "+marker), "whitespace", "", marker)
	}
	ents, _ := os.ReadDir(dir)
	for _, f := range ents {
		if strings.Contains(f.Name(), " ") || strings.Contains(f.Name(), "\u3000") {
			t.Errorf("a file was made with the space in its name: %q", f.Name())
		}
	}
}

// Item 3 (environment): ONCE_STORE or ONCE_STORE_PASSWORD_FILE set but empty is refused, not taken
// as unset: an unset $DSN in a crontab would otherwise move the job to the local SQLite file.
func TestEmptyStoreEnvironment(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, v := range []struct{ kv, want string }{
		{"ONCE_STORE=", "ONCE_STORE is set but empty: unset it to use the embedded store, or give a DSN"},
		{"ONCE_STORE_PASSWORD_FILE=", "ONCE_STORE_PASSWORD_FILE is set but empty"},
	} {
		e := newEnv(t)
		e.vars = append(e.vars, v.kv)
		checkRefused(t, e.run("run", "--task", "t", "--", "sh", "-c", "echo x >> "+marker), v.want, "", marker)
		checkRefused(t, e.run("history"), v.want, "", marker)
		if r := e.run("doctor"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, v.want) {
			t.Errorf("doctor with %s: %d %s%s", v.kv, r.code, r.stdout, r.stderr)
		}
	}
}

// Item 7: errors never show a password, whatever form the DSN takes, and never garble the message
// by replacing the password in free text; webhook paths and ping UUIDs are not logged.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	const pw = "s3cr3tpw"
	for _, c := range []struct {
		dsn  string
		code int
		want string
	}{
		{"host=127.0.0.1 port=5432 user=once password=" + pw + " dbname=once", 64, "key=value"},
		{"host=127.0.0.1 user=once password='" + pw + " x' dbname=once", 64, "key=value"},
		{"once:" + pw + "@127.0.0.1:5432/once", 64, "unknown scheme"},
		{"postgres://once@127.0.0.1:1/once?sslpassword=" + pw + "&sslmode=maybe", 64, "sslmode"},
		{"postgres://once@127.0.0.1:1/once?sslpassword=" + pw + ";x", 64, `"sslpassword"`},
		{"postgres://once:" + pw + "/x@127.0.0.1:1/once", 64, "%2F"}, // a raw '/' in the password: refused, saying how to write it
		{"postgres://once:" + pw + "%zz@127.0.0.1:1/once", 64, "percent-escape"},
		{"mysql://once:" + pw + "@127.0.0.1:1/once?prefix=a;b", 64, `"prefix"`},
		{"redis://:" + pw + "@127.0.0.1:1/0?db=1", 64, `"db"`},
		{"redis://:" + pw + "@127.0.0.1:1/x", 64, "database number"},
		{"etcd://root:" + pw + "@127.0.0.1:1/path", 64, "path"},
		{"postgres://once:" + pw + "@127.0.0.1:1/once", 69, "127.0.0.1:1/once"},
		{"mysql://once:" + pw + "@127.0.0.1:1/once", 69, "127.0.0.1:1/once"},
		// A password that is also a word of the message: the message stays whole.
		{"postgres://once:once@127.0.0.1:1/once", 69, "postgres 127.0.0.1:1/once"},
	} {
		r := e.run("run", "--task", "pw", "--store", c.dsn, "--", "sh", "-c", "echo x >> "+marker)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, pw) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, want %d, one line with %q and no password: %q", c.dsn, r.code, c.code, c.want, r.stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran")
	}

	// Webhooks: a delivery that fails is logged with scheme and host only.
	r := e.run("run", "--task", "hook", "--notify-timeout", "3s",
		"--notify", "http://127.0.0.1:1/services/T0001/B0002/WEBHOOKSECRET",
		"--ping", "http://127.0.0.1:1/PING-UUID-SECRET", "--", "sh", "-c", "exit 3")
	if r.code != 3 || !strings.Contains(r.stderr, "not delivered") || !strings.Contains(r.stderr, "http://127.0.0.1:1/…") ||
		strings.Contains(r.stderr, "SECRET") {
		t.Fatalf("notify: exit %d\n%s", r.code, r.stderr)
	}
	if r := e.run("run", "--task", "hook", "--notify", "hooks.example/T0001/SECRET", "--", "true"); r.code != 64 || strings.Contains(r.stderr, "SECRET") {
		t.Fatalf("bad notify URL: %d %s", r.code, r.stderr)
	}
}

// passwordFile writes pw to a new file of mode perm.
func passwordFile(t *testing.T, pw string, perm os.FileMode) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "store.pw")
	if err := os.WriteFile(f, []byte(pw+"\n"), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, perm); err != nil {
		t.Fatal(err)
	}
	return f
}

// withoutPassword is dsn with the password taken out of its user info.
func withoutPassword(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// treeArgs is the command line of pid and of every descendant, as ps shows them to any local user.
func treeArgs(pid int) []string {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var out []string
	var walk func(int)
	walk = func(p int) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); err == nil {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return out
}

// Item 7: with --store-password-file the password is in no argv (ps), in no message and not in the
// job's environment; the job still reaches the store (a nested once report). Refusals: a file
// others can read, a symbolic link, someone else's file, an empty file, a DSN that has a password
// already, a store that takes none.
func TestStorePasswordFile(t *testing.T) {
	t.Parallel()
	type target struct{ name, dsn, pw string }
	var targets []target
	for _, env := range []string{"ONCE_TEST_POSTGRES", "ONCE_TEST_MYSQL"} {
		if dsn := os.Getenv(env); dsn != "" && secretOf(dsn) != "" {
			targets = append(targets, target{env, withoutPassword(t, dsn), secretOf(dsn)})
		}
	}
	if addr, pw, ok := privateRedis(t, "--requirepass", "r3d1s-s3cr3t"); ok {
		targets = append(targets, target{"redis requirepass", "redis://" + addr + "/0", pw})
	}
	if len(targets) == 0 {
		t.Skip("no store with a password: set ONCE_TEST_POSTGRES or ONCE_TEST_MYSQL, or install redis-server")
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			dsn := withQuery(tg.dsn, fmt.Sprintf("prefix=pwf%d", time.Now().UnixNano()%1e9))
			file := passwordFile(t, tg.pw, 0o600)
			e := newEnv(t)
			envFile := filepath.Join(dir, "env")
			job := fmt.Sprintf("env > %s; %s report --records 7 || exit 9; sleep 1", envFile, bin)
			c := e.cmd(context.Background(), "run", "--task", "pwf", "--slot", "s1", "--store", dsn, "--store-password-file", file, "--", "sh", "-c", job)
			var se bytes.Buffer
			c.Stderr = &se
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(envFile); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			args := treeArgs(c.Process.Pid)
			if err := c.Wait(); err != nil {
				t.Fatalf("run: %v\n%s", err, se.String())
			}
			if len(args) < 2 {
				t.Fatalf("saw only %q of the run's processes", args)
			}
			for _, a := range args {
				if strings.Contains(a, tg.pw) {
					t.Fatalf("the password is in a command line ps shows: %q", a)
				}
			}
			env, _ := os.ReadFile(envFile)
			if strings.Contains(string(env), tg.pw) || !strings.Contains(string(env), "ONCE_STORE="+dsn+"\n") ||
				!strings.Contains(string(env), "ONCE_STORE_PASSWORD_FILE="+file+"\n") {
				t.Fatalf("the job's environment:\n%s", env)
			}
			if strings.Contains(se.String(), tg.pw) {
				t.Fatalf("password in once's stderr: %s", se.String())
			}
			// The environment route; the nested report was recorded.
			e.vars = append(e.vars, "ONCE_STORE="+dsn, "ONCE_STORE_PASSWORD_FILE="+file)
			h := e.history("pwf")
			if len(h) == 0 || h[0]["records"] != float64(7) {
				t.Fatalf("history: %v", h)
			}
			// A wrong password: 69, not shown.
			wrong := passwordFile(t, "wrong-"+tg.pw, 0o600)
			r := newEnv(t).run("status", "--store", dsn, "--store-password-file", wrong)
			if r.code != 69 || strings.Contains(r.stderr, tg.pw) {
				t.Fatalf("wrong password: %d %s", r.code, r.stderr)
			}
		})
	}

	// Refusals, checked before anything is opened.
	marker := filepath.Join(t.TempDir(), "ran")
	dsn := "postgres://once@127.0.0.1:1/once"
	good := passwordFile(t, "pw", 0o600)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--store", dsn, "--store-password-file", passwordFile(t, "pw", 0o644)}, "chmod 600"},
		{[]string{"--store", dsn, "--store-password-file", passwordFile(t, "pw", 0o640)}, "chmod 600"},
		{[]string{"--store", dsn, "--store-password-file", link}, "symbolic link"},
		{[]string{"--store", dsn, "--store-password-file", passwordFile(t, "", 0o600)}, "is empty"},
		{[]string{"--store", dsn, "--store-password-file", passwordFile(t, "a\nb", 0o600)}, "more than one line"},
		{[]string{"--store", dsn, "--store-password-file", filepath.Join(t.TempDir(), "none")}, "does not exist"},
		{[]string{"--store", dsn, "--store-password-file", t.TempDir()}, "not a regular file"},
		{[]string{"--store", "postgres://once:inline@127.0.0.1:1/once", "--store-password-file", good}, "has a password already"},
		{[]string{"--store", "sqlite:///" + filepath.Join(t.TempDir(), "x.db"), "--store-password-file", good}, "sqlite stores take no password"},
		{[]string{"--store", "zk://127.0.0.1:1", "--store-password-file", good}, "needs a user and a password"}, // digest auth: zk://USER@host
		{[]string{"--store-password-file", good}, "sqlite stores take no password"},                             // the embedded default
	}
	if os.Geteuid() == 0 {
		other := passwordFile(t, "pw", 0o600)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			args []string
			want string
		}{[]string{"--store", dsn, "--store-password-file", other}, "chown 0"})
	}
	for _, c := range cases {
		r := newEnv(t).run(append(append([]string{"run", "--task", "pwf"}, c.args...), "--", "sh", "-c", "echo x >> "+marker)...)
		checkRefused(t, r, c.want, "inline", marker)
	}
}

// privateRedis starts a redis-server of the test's own on a free port (without persistence, so
// its durability warning fires), with extra arguments; ok is false without redis-server.
func privateRedis(t *testing.T, extra ...string) (addr, password string, ok bool) {
	t.Helper()
	_, addr, password, ok = privateRedisServer(t, extra...)
	return addr, password, ok
}

// privateRedisServer is privateRedis with the server's process, which a test may freeze (SIGSTOP:
// a store that accepts connections and answers nothing). The cleanup thaws it before the kill.
func privateRedisServer(t *testing.T, extra ...string) (proc *os.Process, addr, password string, ok bool) {
	t.Helper()
	rs, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", "", false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, extra...)
	cmd := exec.Command(rs, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if i > 200 {
			t.Fatal("private redis-server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	for i, a := range extra {
		if a == "--requirepass" && i+1 < len(extra) {
			password = extra[i+1]
		}
	}
	return cmd.Process, addr, password, true
}

// Item 12: with --log-format json every line once writes on stderr is JSON, the store's warning
// included, and doctor reports that warning once.
func TestOneLogger(t *testing.T) {
	t.Parallel()
	addr, _, ok := privateRedis(t)
	if !ok {
		t.Skip("redis-server not installed")
	}
	dsn := "redis://" + addr + "/0?prefix=logs"
	e := newEnv(t)
	r := e.run("run", "--task", "j", "--store", dsn, "--log-format", "json", "--", "true")
	if r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	warnings := 0
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line on stderr: %q", l)
		}
		if strings.Contains(fmt.Sprint(m["msg"]), "appendonly is off") {
			warnings++
			if m["level"] != "WARN" || m["check"] != "durability" {
				t.Errorf("warning: %s", l)
			}
		}
	}
	if warnings != 1 {
		t.Fatalf("%d durability warnings, want 1:\n%s", warnings, r.stderr)
	}
	for _, format := range []string{"text", "json"} {
		r = e.run("doctor", "--store", dsn, "--log-format", format)
		if n := strings.Count(r.stdout+r.stderr, "appendonly is off"); n != 1 || r.code != 1 {
			t.Fatalf("doctor (%s) said it %d times, exit %d:\n%s%s", format, n, r.code, r.stdout, r.stderr)
		}
	}
	r = e.run("doctor", "--store", dsn, "--log-format", "json", "--json")
	if strings.TrimSpace(r.stderr) != "" || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("doctor --json: %q %q", r.stdout, r.stderr)
	}
}
