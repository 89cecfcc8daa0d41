package cli

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A pending claim's run id comes from ONCE_RUN_ID (or any writer of the store): one with a line
// break is refused now (64, store.Claimant.Check), but an older once stored it, and once keys
// status showed it raw in its table, so the line after it read as a row of its own (a forged key
// and state), and once keys claim's "unknown" line on stderr the same. Both show it escaped, on
// one line.
func TestKeysRunIDOnOneLine(t *testing.T) {
	home := t.TempDir()
	t.Setenv("ONCE_HOME", home)
	for _, k := range []string{"ONCE_STORE", "ONCE_STORE_PASSWORD_FILE"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	const forged = "r1\nforged  succeeded  r2"
	t.Setenv("ONCE_TASK", "t")
	t.Setenv("ONCE_RUN_ID", forged)
	t.Setenv("ONCE_FENCING_TOKEN", "1")
	run := func(stdin string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, _, stderr := run("k1\n", "keys", "claim", "--scope", "s", "--pending"); code != ExitUsage || !strings.Contains(stderr, "claimant run id") {
		t.Fatalf("claim with a line break in ONCE_RUN_ID: %d %s, want 64", code, stderr)
	}
	t.Setenv("ONCE_RUN_ID", "r1")
	if code, _, stderr := run("k1\n", "keys", "claim", "--scope", "s", "--pending"); code != ExitOK {
		t.Fatalf("claim: %d %s", code, stderr)
	}
	// As an older once wrote it.
	db, err := sql.Open("sqlite", filepath.Join(home, "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var table string
	if err := db.QueryRow(`SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%fingerprint%'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE `+table+` SET run_id = ? WHERE key = 'k1'`, forged); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCE_TASK", "")
	t.Setenv("ONCE_RUN_ID", "")
	t.Setenv("ONCE_FENCING_TOKEN", "")
	code, stdout, stderr := run("", "keys", "status", "--scope", "s", "k1")
	if code != ExitOK || strings.Contains(stdout, "\nforged") || !strings.Contains(stdout, `r1\nforged`) {
		t.Errorf("keys status: %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = run("k1\n", "keys", "claim", "--scope", "s")
	if strings.Contains(stderr, "\nforged") || !strings.Contains(stderr, `r1\nforged`) {
		t.Errorf("keys claim of an unknown key: %d %q", code, stderr)
	}
}
