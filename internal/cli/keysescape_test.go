package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// A pending claim's run id comes from ONCE_RUN_ID (or any writer of the store) and may hold a
// newline: once keys status showed it raw in its table, so the line after it read as a row of its
// own (a forged key and state), and once keys claim's "unknown" line on stderr the same. Both show
// it escaped, on one line.
func TestKeysRunIDOnOneLine(t *testing.T) {
	t.Setenv("ONCE_HOME", t.TempDir())
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
	if code, _, stderr := run("k1\n", "keys", "claim", "--scope", "s", "--pending"); code != ExitOK {
		t.Fatalf("claim: %d %s", code, stderr)
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
