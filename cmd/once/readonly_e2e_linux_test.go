package main

// A ledger this process cannot write (a file system remounted read-only at 3 a.m., a monitoring user
// with read access only): the commands that only read it work, and tell the whole ledger or fail in
// one line with the fix; the commands that write fail with 69, as before.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/testfs"
	"github.com/once-run/once/store/sqlite"
)

// roMount mounts a fresh tmpfs for the test (root only); remount switches it read-only or back.
func roMount(t *testing.T) (mnt string, remount func(ro bool)) {
	t.Helper()
	needRoot(t)
	return testfs.Tmpfs(t, "700")
}

// wantLedger checks that history has the two runs fillLedger made and keys status its key.
func wantLedger(t *testing.T, run func(args ...string) result) {
	t.Helper()
	r := run("history", "--json")
	if r.code != 0 {
		t.Fatalf("history: exit %d: %s", r.code, r.stderr)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("history --json: %v\n%s", err, r.stdout)
	}
	states := map[string]any{}
	for _, e := range entries {
		states[e["task"].(string)] = e["state"]
	}
	if states["ro-ok"] != "succeeded" || states["ro-fail"] != "failed" {
		t.Fatalf("history: %v, want ro-ok succeeded and ro-fail failed\n%s", states, r.stdout)
	}
	if r := run("status"); r.code != 0 || !strings.Contains(r.stdout, "LEASES") {
		t.Fatalf("status: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("keys", "status", "--scope", "ro", "k1"); r.code != 0 || !strings.Contains(r.stdout, "done") {
		t.Fatalf("keys status: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("backfill", "--task", "ro-ok", "--per", "day", "--from", "2026-01-01", "--to", "2026-01-02", "--dry-run", "--", "true"); r.code != 0 || !strings.Contains(r.stdout, "2 to run") {
		t.Fatalf("backfill --dry-run: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("prune", "--older-than", "1h", "--dry-run", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"attempts":`) {
		t.Fatalf("prune --dry-run: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

func fillLedger(t *testing.T, e *env) {
	t.Helper()
	for _, c := range [][]string{
		{"keys", "claim", "--scope", "ro", "k1"},
		{"run", "--task", "ro-ok", "--", "true"},
		{"run", "--task", "ro-fail", "--", "false"},
	} {
		if r := e.run(c...); r.code != 0 && c[2] != "ro-fail" {
			t.Fatalf("%v: exit %d: %s", c, r.code, r.stderr)
		}
	}
}

// checkpoint copies the -wal file into the database and empties it, as a clean shutdown may leave it.
func checkpoint(t *testing.T, db string) {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
}

func TestReadOnlyMountReadsLedger(t *testing.T) {
	mnt, remount := roMount(t)
	e := newEnv(t)
	e.home = filepath.Join(mnt, "home")
	e.vars[0] = "ONCE_HOME=" + e.home
	fillLedger(t, e)
	db := filepath.Join(e.home, "once.db")
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the runs left no writes in the -wal file (%v): this test reads them from it", err)
	}
	os.Mkdir(filepath.Join(mnt, "empty"), 0o700)
	remount(true)

	// The -wal file holds the writes; SQLite rebuilds its index in memory from the -shm it cannot write.
	wantLedger(t, e.run)
	jobs := filepath.Join(t.TempDir(), "jobs.toml")
	if err := os.WriteFile(jobs, []byte("[[job]]\nname = \"ro-ok\"\nschedule = \"@daily\"\ncommand = [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.run("jobs", "--jobs", jobs); r.code != 0 || !strings.Contains(r.stdout, "succeeded") {
		t.Fatalf("jobs: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	refused69(t, e.run("pause", "ro-ok"), "", "read-only", "remount it read-write")
	r := e.run("doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL  access") || !strings.Contains(r.stdout, "the file system is read-only") {
		t.Fatalf("doctor: exit %d, want 1 with FAIL access:\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Writers still fail closed, in one line that says why.
	ran, script := ranFile(t)
	refused69(t, e.run("run", "--task", "ro-new", "--", "sh", "-c", script), ran, "read-only file system")
	refused69(t, e.run("keys", "claim", "--scope", "ro", "k2"), "", "read-only", "remount it read-write")
	refused69(t, e.run("prune", "--older-than", "1h"), "", "read-only", "remount it read-write")
	other := newEnv(t) // its own, writable ONCE_HOME: only the store is read-only
	refused69(t, other.run("--store", "sqlite://"+db, "run", "--task", "ro-new", "--", "sh", "-c", script), ran, "the file system is read-only", "remount it read-write")
	// No ledger at all: said, not shown as an empty one.
	r = e.run("--store", "sqlite://"+filepath.Join(mnt, "empty", "once.db"), "status")
	refused69(t, r, "", "no ledger here", "point ONCE_HOME or --store at the ledger")

	// Without its -shm file, a -wal file that holds writes cannot be read here: said, with the fix.
	remount(false)
	if err := os.Remove(db + "-shm"); err != nil {
		t.Fatal(err)
	}
	remount(true)
	refused69(t, e.run("status"), "", "-shm file is missing", "read the copy")
	refused69(t, e.run("history"), "", "-shm file is missing")

	// Without a -shm file and with nothing in the -wal file, nobody can write: read as immutable.
	remount(false)
	checkpoint(t, db)
	os.Remove(db + "-shm")
	remount(true)
	wantLedger(t, e.run)
}

// A user who may read the ledger but not write it (monitoring): reading works, writing fails with 69,
// and the owner's files are left as they were.
func TestReaderWithoutWritePermission(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	fillLedger(t, e)
	// The way to the binary and the ledger, readable by others.
	for d := e.home; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	files, _ := filepath.Glob(filepath.Join(e.home, "*once.db*"))
	for _, f := range files {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, e.home)
	var extraEnv []string
	asNobody := func(args ...string) result {
		t.Helper()
		return runAs(t, e, nobody, extraEnv, args...)
	}
	wantLedger(t, asNobody)
	r := asNobody("doctor")
	if r.code != 1 || strings.Contains(r.stdout, "FAIL") || !strings.Contains(r.stdout, "WARN  access") || !strings.Contains(r.stdout, "WARN  locks") {
		t.Fatalf("doctor: exit %d, want 1 with WARN access and locks, no FAIL:\n%s%s", r.code, r.stdout, r.stderr)
	}
	refused69(t, asNobody("keys", "claim", "--scope", "ro", "k2"), "", "uid 65534 cannot write", "run it as the ledger's owner")
	// With a home of its own (its locks), the ledger given by --store.
	own := filepath.Join(filepath.Dir(e.home), "nobody")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	extraEnv = []string{"ONCE_HOME=" + own}
	ran, script := ranFile(t)
	os.Chmod(filepath.Dir(ran), 0o777)
	refused69(t, asNobody("--store", "sqlite://"+filepath.Join(e.home, "once.db"), "run", "--task", "ro-new", "--", "sh", "-c", script), ran, "uid 65534 cannot write", "run it as the ledger's owner")
	extraEnv = nil
	if after := snapshot(t, e.home); after != before {
		t.Fatalf("the reader changed the owner's files:\n%s\n%s", before, after)
	}
	// A -wal file it may not read, or a -shm file missing that it cannot create: said, with the fix.
	db := filepath.Join(e.home, "once.db")
	os.Chmod(db+"-wal", 0o600)
	refused69(t, asNobody("status"), "", "cannot be read read-only", "readable by this user")
	os.Chmod(db+"-wal", 0o644)
	os.Chmod(sqlite.MarkerPath(db), 0o600)
	refused69(t, asNobody("status"), "", "permission denied", "chmod 644 "+sqlite.MarkerPath(db))
	os.Chmod(sqlite.MarkerPath(db), 0o644)
	if err := os.Rename(db+"-shm", db+"-shm.aside"); err != nil {
		t.Fatal(err)
	}
	refused69(t, asNobody("history"), "", "-shm file is missing", "run any once command as the ledger's owner")
	if err := os.Rename(db+"-shm.aside", db+"-shm"); err != nil {
		t.Fatal(err)
	}
	// The owner goes on writing.
	if r := e.run("run", "--task", "ro-ok", "--slot", "2", "--", "true"); r.code != 0 {
		t.Fatalf("the owner's run after the reader: exit %d: %s", r.code, r.stderr)
	}
}

// snapshot is the names, owners and modes of the files in dir.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, de := range ents {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, de.Name()), &st); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s uid %d mode %#o\n", de.Name(), st.Uid, st.Mode)
	}
	return b.String()
}

// runAs runs once with e's environment (and extraEnv) as uid.
func runAs(t *testing.T, e *env, uid uint32, extraEnv []string, args ...string) result {
	t.Helper()
	c := e.cmd(context.Background(), args...)
	c.Env = append(c.Env, extraEnv...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var so, se strings.Builder
	c.Stdout, c.Stderr = &so, &se
	err := c.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var pe *fs.PathError
	switch ee, ok := err.(interface{ ExitCode() int }); {
	case ok:
		r.code = ee.ExitCode()
	case errors.As(err, &pe), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EPERM):
		// The binary is under a directory uid cannot enter (TMPDIR in /root), or uid is not mapped
		// in this user namespace: not what is tested here.
		t.Skipf("cannot run once as uid %d: %v", uid, err)
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// A ledger directory that another user made in a sticky directory (a pre-created /tmp/once-svc):
// that user is not "the ledger's owner" a reader may trust, since anyone could have made it there.
// A reader refuses it with 69, as before the reader's exception.
func TestReaderRefusesOwnerInStickyDir(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sticky := filepath.Join(filepath.Dir(e.home), "sticky")
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(sticky, 0o1777); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(sticky); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	e.home = filepath.Join(sticky, "svc")
	e.vars[0] = "ONCE_HOME=" + e.home
	fillLedger(t, e) // the forged ledger, as the other user would write it
	const other = 1234
	if err := filepath.Walk(e.home, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if fi.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		return os.Lchown(p, other, other)
	}); err != nil {
		t.Fatal(err)
	}
	r := runAs(t, e, nobody, nil, "history")
	refused69(t, r, "", "belongs to uid 1234 but is in "+sticky, "anyone could have made it")
	if r := runAs(t, e, nobody, nil, "doctor"); r.code != 1 || !strings.Contains(r.stdout, "FAIL  locks") || strings.Contains(r.stdout, "run jobs as uid 1234") {
		t.Fatalf("doctor: exit %d, want 1 with FAIL locks, not the advice to run jobs as uid 1234:\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A command that writes keeps the trust check's line: not "run it as the ledger's owner".
	own := filepath.Join(filepath.Dir(sticky), "nobody")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	r = runAs(t, e, nobody, []string{"ONCE_HOME=" + own}, "--store", "sqlite://"+filepath.Join(e.home, "once.db"), "keys", "claim", "--scope", "ro", "k2")
	refused69(t, r, "", "is owned by uid 1234, not 65534")
	if strings.Contains(r.stderr, "ledger's owner") {
		t.Fatalf("a write to a ledger anyone could have made: %s, want the trust check's line", r.stderr)
	}
	// Its real owner reads it as before.
	if r := runAs(t, e, other, nil, "history"); r.code != 0 || !strings.Contains(r.stdout, "ro-ok") {
		t.Fatalf("the owner's history: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// A read-only bind mount of a ledger written through another mount (a container's view of the
// host's ledger) fails with EROFS, but the file system is not read-only: a writer goes on. It is
// read with mode=ro, never immutable=1, which skips locking and never reads the -wal again: a
// once serve on the view shows a run made after it started; without the -wal and -shm files, it
// cannot be read there and says so.
func TestReadOnlyBindMountOfLiveLedger(t *testing.T) {
	mnt, _ := roMount(t)
	e := newEnv(t)
	e.home = filepath.Join(mnt, "home")
	e.vars[0] = "ONCE_HOME=" + e.home
	fillLedger(t, e)
	view := filepath.Join(t.TempDir(), "view")
	if err := os.Mkdir(view, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(mnt, view, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(view, unix.MNT_DETACH) })
	if err := unix.Mount("", view, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot make the bind mount read-only: %v", err)
	}
	db := filepath.Join(e.home, "once.db")
	reader := newEnv(t) // its own ONCE_HOME; only the store is the view
	viewStore := "sqlite://" + filepath.Join(view, "home", "once.db")

	// A tool that closes the database last deletes the -wal and -shm files.
	checkpoint(t, db)
	refused69(t, reader.run("--store", viewStore, "status"), "", "bind mount", "read the copy")

	// A checkpoint that emptied the -wal file and kept the -shm (its connection still open).
	if r := e.run("run", "--task", "ro-ok", "--slot", "2", "--", "true"); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	c, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	c.SetMaxOpenConns(1)
	t.Cleanup(func() { c.Close() })
	if _, err := c.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() != 0 {
		t.Fatalf("the -wal file after the checkpoint: %v, want it empty", err)
	}
	base := startServe(t, reader, "--store", viewStore, "--listen", "127.0.0.1:0")
	if r := e.run("run", "--task", "ro-late", "--", "true"); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	resp, err := http.Get(base + "/api/v1/history?task=ro-late")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ro-late"`) {
		t.Fatalf("serve on the view after a run: %d %s, want the run", resp.StatusCode, body)
	}
}
