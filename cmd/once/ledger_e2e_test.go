package main

// The embedded ledger's files (issue 11, items 4 and 5): a ledger someone else can change is refused, and
// one that was deleted, emptied or replaced is never taken for a new one.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
}

// refused69 checks a 69 with one line on stderr that contains every want, and that nothing ran.
func refused69(t *testing.T, r result, ran string, want ...string) {
	t.Helper()
	if r.code != 69 {
		t.Fatalf("exit %d, want 69\n%s", r.code, r.stderr)
	}
	t.Log(strings.TrimSpace(r.stderr))
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "once: ") {
		t.Fatalf("want one line on stderr, got %q", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("stderr lacks %q: %s", w, r.stderr)
		}
	}
	if ran != "" {
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("the command ran")
		}
	}
}

// doctorFails checks that doctor exits 1 with a FAIL line for check that contains want.
func doctorFails(t *testing.T, e *env, check, want string) {
	t.Helper()
	r := e.run("doctor")
	if r.code != 1 {
		t.Fatalf("doctor: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "FAIL") && strings.Contains(l, " "+check+" ") && strings.Contains(l, want) {
			return
		}
	}
	t.Fatalf("doctor has no FAIL %s line with %q:\n%s", check, want, r.stdout)
}

// ranFile is a file a command creates when it runs.
func ranFile(t *testing.T) (path, script string) {
	path = filepath.Join(t.TempDir(), "ran")
	return path, "echo x >> " + path
}

func TestLedgerFirstCreationIsSilent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran, script := ranFile(t)
	r := e.run("run", "--task", "new", "--slot", "s", "--", "sh", "-c", script)
	if r.code != 0 || countLines(t, ran) != 1 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	if strings.TrimSpace(r.stderr) != "" { // quiet under a non-terminal stderr: a warning would show
		t.Errorf("first creation said something: %s", r.stderr)
	}
	fi, err := os.Stat(filepath.Join(e.home, ".once.db.ledger"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker: %v %v", fi, err)
	}
	if r := e.run("run", "--task", "new", "--slot", "s", "--", "sh", "-c", script); r.code != 0 || countLines(t, ran) != 1 {
		t.Fatalf("second run: %d, ran %d times\n%s", r.code, countLines(t, ran), r.stderr)
	}
	// (doctor exits 1 here: two launches within 10s are a burst.)
	if r := e.run("doctor"); !strings.Contains(r.stdout, "OK    ledger") || !strings.Contains(r.stdout, "OK    files") || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("doctor: %d\n%s", r.code, r.stdout)
	}
}

func TestLedgerOthersCanChangeIsRefused(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, string, string) {
		e := newEnv(t)
		if r := e.run("run", "--task", "t", "--slot", "s0", "--", "true"); r.code != 0 {
			t.Fatalf("setup: %d %s", r.code, r.stderr)
		}
		ran, script := ranFile(t)
		return e, ran, script
	}
	t.Run("0777 home", func(t *testing.T) {
		e, ran, script := setup(t)
		if err := os.Chmod(e.home, 0o777); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script), ran, "chmod")
		refused69(t, e.run("history"), "", "chmod")
		refused69(t, e.run("status"), "", "chmod")
		doctorFails(t, e, "locks", "chmod o-w "+e.home)
		if err := os.Chmod(e.home, 0o700); err != nil {
			t.Fatal(err)
		}
		if r := e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script); r.code != 0 {
			t.Fatalf("after the fix: %d %s", r.code, r.stderr)
		}
	})
	t.Run("0666 db", func(t *testing.T) {
		e, ran, script := setup(t)
		db := filepath.Join(e.home, "once.db")
		if err := os.Chmod(db, 0o666); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script), ran, "chmod 600 "+db)
		refused69(t, e.run("resolve", "--task", "t", "--slot", "s0", "--as", "succeeded", "--by", "root"), "", "chmod 600 "+db)
		refused69(t, e.run("history"), "", "chmod 600 "+db)
		doctorFails(t, e, "files", "chmod 600 "+db)
	})
	t.Run("sticky world-writable directory in the DSN", func(t *testing.T) {
		e, ran, script := setup(t)
		tmp := filepath.Join(t.TempDir(), "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(tmp, 0o1777); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(tmp, "x.db")
		refused69(t, e.run("run", "--store", "sqlite://"+db, "--task", "t", "--", "sh", "-c", script), ran, "mkdir -m 700 "+filepath.Join(tmp, "once"))
		if _, err := os.Stat(db); err == nil {
			t.Fatal("the database was created in a world-writable directory")
		}
	})

	needRoot(t)
	t.Run("home of another user", func(t *testing.T) {
		e, ran, script := setup(t)
		if err := os.Chown(e.home, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script), ran, "owned by uid 65534")
		refused69(t, e.run("history"), "", "chown 0 "+e.home)
		refused69(t, e.run("status"), "", "chown 0 "+e.home)
		refused69(t, e.run("resolve", "--task", "t", "--slot", "s0", "--as", "succeeded", "--by", "root"), "", "chown 0 "+e.home)
		doctorFails(t, e, "files", "chown 0 "+e.home)
		doctorFails(t, e, "locks", "owned by uid 65534")
	})
	t.Run("their db swapped in", func(t *testing.T) {
		e, ran, script := setup(t)
		db := filepath.Join(e.home, "once.db")
		if err := os.Chown(db, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script), ran, "chown 0 "+db)
	})
	t.Run("their -wal pre-created", func(t *testing.T) {
		e, ran, script := setup(t)
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		wal := filepath.Join(dir, "x.db-wal")
		if err := os.WriteFile(wal, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(wal, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--store", "sqlite://"+filepath.Join(dir, "x.db"), "--task", "t", "--", "sh", "-c", script), ran, wal)
	})
	t.Run("symlinked home", func(t *testing.T) {
		e, ran, script := setup(t)
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(e.home, link); err != nil {
			t.Fatal(err)
		}
		e.vars[0] = "ONCE_HOME=" + link
		// Our own link to our own home: followed (only we and root could repoint it).
		if r := e.run("run", "--task", "t", "--slot", "s1", "--", "sh", "-c", script); r.code != 0 || countLines(t, ran) != 1 {
			t.Fatalf("own link: %d %s", r.code, r.stderr)
		}
		if err := os.Lchown(link, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		refused69(t, e.run("run", "--task", "t", "--slot", "s2", "--", "sh", "-c", script), "", "symbolic link owned by uid 65534")
		doctorFails(t, e, "files", "symbolic link owned by uid 65534")
		if err := os.Lchown(link, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(e.home, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		// The local lock is taken before the store is opened: its check of the directories above the
		// lock directory speaks first.
		refused69(t, e.run("run", "--task", "t", "--slot", "s2", "--", "sh", "-c", script), "", e.home+" is owned by uid 65534")
		if countLines(t, ran) != 1 {
			t.Fatal("the command ran through an unsafe link")
		}
	})
}

func TestLedgerLostBetweenRunsIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		do   func(t *testing.T, db string)
		want string
	}{
		{"deleted", func(t *testing.T, db string) {
			for _, x := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(db + x); err != nil {
					t.Fatal(err)
				}
			}
		}, "the file is missing"},
		{"truncated to 0 bytes", func(t *testing.T, db string) {
			if err := os.Truncate(db, 0); err != nil {
				t.Fatal(err)
			}
		}, "the file is empty (0 bytes)"},
		{"wal and shm deleted", func(t *testing.T, db string) {
			// once run does not checkpoint at exit: the latest writes live in the -wal file.
			for _, x := range []string{"-wal", "-shm"} {
				if err := os.Remove(db + x); err != nil {
					t.Fatal(err)
				}
			}
		}, "went back in time: it counts 2 writes"}, // a run is two counted writes: begin, finish+release (the start is not synced: store.LazyStarter)
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ran, script := ranFile(t)
			for _, task := range []string{"a", "b"} {
				if r := e.run("run", "--task", task, "--slot", "done", "--", "true"); r.code != 0 {
					t.Fatalf("setup: %d %s", r.code, r.stderr)
				}
				if task == "a" {
					e.run("doctor") // closes the store: a checkpoint, so the file itself holds task a's run
				}
			}
			db := filepath.Join(e.home, "once.db")
			marker := filepath.Join(e.home, ".once.db.ledger")
			c.do(t, db)
			refused69(t, e.run("run", "--task", "a", "--slot", "done", "--", "sh", "-c", script), ran, c.want, "rm "+marker)
			refused69(t, e.run("history"), "", c.want)
			doctorFails(t, e, "ledger", "rm "+marker)

			// Starting a new ledger on purpose: remove the marker too.
			if err := os.Remove(marker); err != nil {
				t.Fatal(err)
			}
			if c.name == "wal and shm deleted" {
				// The file itself is an older ledger: accepted as it is, task a's success kept.
				if r := e.run("run", "--task", "a", "--slot", "done", "--", "sh", "-c", script); r.code != 0 || countLines(t, ran) != 0 {
					t.Fatalf("accepting the older ledger: %d, ran %d\n%s", r.code, countLines(t, ran), r.stderr)
				}
				return
			}
			os.Remove(db) // a 0-byte file becomes the new ledger, too; remove it for the token check
			if r := e.run("run", "--task", "a", "--slot", "done", "--", "sh", "-c", "echo $ONCE_FENCING_TOKEN > "+ran); r.code != 0 {
				t.Fatalf("new ledger: %d %s", r.code, r.stderr)
			}
			if got, _ := os.ReadFile(ran); strings.TrimSpace(string(got)) != "1" {
				t.Fatalf("new ledger: token %q, want 1", got)
			}
		})
	}
}

// The ledger deleted or emptied while a command runs: the next renewal finds it gone, the lease is lost at
// once, the command is stopped, its outcome is reported as not recorded, and the next run is refused.
func TestLedgerLostDuringRun(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, db string)
		want string
	}{
		{"deleted", func(t *testing.T, db string) {
			for _, x := range []string{"", "-wal", "-shm"} {
				os.Remove(db + x)
			}
		}, "once.db was deleted while in use"},
		{"truncated", func(t *testing.T, db string) {
			if err := os.Truncate(db, 0); err != nil {
				t.Fatal(err)
			}
		}, "emptied (0 bytes) while in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			dir := t.TempDir()
			cmd, pid := startOnce(t, e, dir, "--task", "long", "--slot", "s", "--ttl", "3s", "--grace", "10s")
			db := filepath.Join(e.home, "once.db")
			c.do(t, db)
			lost := time.Now()
			// Renewals happen every ttl/3 = 1s; the lost lease stops the command at once.
			if !waitDead(pid, 3*time.Second) {
				t.Fatalf("command still alive %s after the ledger was lost", time.Since(lost))
			}
			t.Logf("command stopped %s after the ledger was lost", time.Since(lost).Round(time.Millisecond))
			err := cmd.Wait()
			code := 0
			if err != nil {
				code = cmd.ProcessState.ExitCode()
			}
			stderr := cmd.Stderr.(*bytes.Buffer).String()
			for _, want := range []string{c.want, "lease lost", "outcome NOT recorded", "was not recorded"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("once's stderr lacks %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "msg=end ") {
				t.Errorf("an end line reported the outcome as recorded:\n%s", stderr)
			}
			if code != 143 {
				t.Errorf("once exit %d, want 143 (the command's status after SIGTERM)", code)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "signals")); !strings.Contains(string(b), "TERM") {
				t.Error("the command was not sent SIGTERM")
			}
			ran, script := ranFile(t)
			refused69(t, e.run("run", "--task", "long", "--slot", "s", "--", "sh", "-c", script), ran, "fix: restore")
		})
	}
}

// A ledger shared by a group is an explicit opt-in (?group=): refused without it, used with it.
func TestLedgerSharedWithGroup(t *testing.T) {
	t.Parallel()
	needRoot(t)
	e := newEnv(t)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, 4242); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(shared, 0o2770); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(shared, "once.db")
	ran, script := ranFile(t)
	refused69(t, e.run("run", "--store", "sqlite://"+db, "--task", "t", "--", "sh", "-c", script), ran, "chmod 700 "+shared)
	if r := e.run("run", "--store", "sqlite://"+db+"?group=4242", "--task", "t", "--", "sh", "-c", script); r.code != 0 || countLines(t, ran) != 1 {
		t.Fatalf("with ?group=: %d %s", r.code, r.stderr)
	}
	var st unix.Stat_t
	if err := unix.Stat(db, &st); err != nil || st.Gid != 4242 || st.Mode&0o777 != 0o660 {
		t.Fatalf("shared db: gid %d mode %#o %v", st.Gid, st.Mode&0o777, err)
	}
	r := e.run("doctor", "--store", "sqlite://"+db+"?group=4242")
	if !strings.Contains(r.stdout, "shared with the members of group 4242") {
		t.Fatalf("doctor:\n%s", r.stdout)
	}
}

// The ledger deleted while the command runs, and the command ends before the next renewal: its outcome is
// committed into the deleted file, so it is reported as not recorded, with no misleading retry error.
func TestLedgerLostBeforeOutcome(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "--task", "x", "--", "true"); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	began := filepath.Join(t.TempDir(), "began")
	go func() {
		// Delete the ledger once the command runs (the attempt is recorded), not at a fixed time: a
		// loaded machine can start once later than that, and then nothing runs (exit 69, correctly).
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(began); err == nil {
				break
			}
		}
		for _, x := range []string{"", "-wal", "-shm"} {
			os.Remove(filepath.Join(e.home, "once.db") + x)
		}
	}()
	r := e.run("run", "--task", "q", "--slot", "s", "--ttl", "9s", "--", "sh", "-c", "touch "+began+"; sleep 0.6")
	if r.code != 0 {
		t.Fatalf("exit %d, want the command's 0\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "was not recorded: store: unavailable") || !strings.Contains(r.stderr, "once.db was deleted while in use") ||
		strings.Contains(r.stderr, "conflict") || strings.Contains(r.stderr, "msg=end ") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	// Retrying the outcome ends when the lease is lost at the next renewal (3s), not at its deadline (9s).
	if r.dur > 7500*time.Millisecond {
		t.Errorf("took %s: the outcome's retries should end when the lease is lost, at the next renewal (3s)", r.dur)
	}
	t.Logf("once ended %s after it started", r.dur.Round(time.Millisecond))
	refused69(t, e.run("run", "--task", "q", "--slot", "s", "--", "true"), "", "the file is missing")
}
