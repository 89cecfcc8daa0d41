package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSlotNotNFC: "café" typed on macOS (e + U+0301, NFD) and written by a Linux script (U+00E9,
// NFC) look the same and were two slots, each run once. A slot value that is not in NFC is bad
// input (64) that names the form to write, before anything runs or is recorded; a slot an older
// once recorded in NFD can still be read and decided, as status's resolve line gives it, and
// doctor names it.
func TestSlotNotNFC(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "nfc.db")
	want := `--slot "cafe\u0301" is not in Unicode NFC form: write it as "café"`
	out := filepath.Join(t.TempDir(), "ran")
	r := e.run("run", "--store", dsn, "--task", "t", "--slot", "cafe\u0301", "--", "touch", out)
	if r.code != 64 || !strings.Contains(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || exists(out) {
		t.Fatalf("run with an NFD slot: exit %d, ran %v, stderr %q; want 64, one line saying %s", r.code, exists(out), r.stderr, want)
	}
	if r := e.run("run", "--store", dsn, "--task", "t", "--slot", "caf\u00e9", "--", "touch", out); r.code != 0 || !exists(out) {
		t.Fatalf("run with the NFC slot: exit %d %s", r.code, r.stderr)
	}
	if r := e.run("resolve", "--store", dsn, "--task", "t", "--slot", "cafe\u0301", "--as", "failed"); r.code != 64 || !strings.Contains(r.stderr, want) {
		t.Fatalf("resolve of an NFD slot never recorded: %d %s", r.code, r.stderr)
	}

	// An older once recorded an NFD slot, left waiting for review.
	recordOldSlot(t, dsn, "lib", "cafe\u0301")
	if r := e.run("history", "--store", dsn, "--task", "lib", "--slot", "cafe\u0301"); r.code != 0 || !strings.Contains(r.stdout, "unknown") {
		t.Fatalf("history of the recorded NFD slot: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("run", "--store", dsn, "--task", "lib", "--slot", "cafe\u0301", "--", "true"); r.code != 64 || !strings.Contains(r.stderr, want) {
		t.Fatalf("a new run in the recorded NFD slot: %d %s; want 64", r.code, r.stderr)
	}
	if r := e.run("doctor", "--store", dsn); !strings.Contains(r.stdout, `slot "cafe\u0301" is not in Unicode NFC`) {
		t.Fatalf("doctor does not name the recorded NFD slot: %d\n%s", r.code, r.stdout)
	}
	e.pasteResolve(dsn, "--slot 'cafe\u0301' ")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
