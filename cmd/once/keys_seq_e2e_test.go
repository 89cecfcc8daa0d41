package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seqClaimJob is a backfill's command: every slot claims the month's key "march" two-phase; the
// first slot fails before it completes it (after checking that its own claim reads pending, not
// gone, while it runs); a later slot that gets the key completes it. Each claim's exit status and
// output go to $DIR/log, its stderr to $DIR/err.
const seqClaimJob = `got=$(once keys claim --scope inv --pending march 2>>"$DIR/err"); rc=$?
echo "$ONCE_SLOT rc=$rc got=$got" >> "$DIR/log"
[ "$rc" = 0 ] || exit $rc
once keys status --scope inv --json march >> "$DIR/log"
[ "$ONCE_SLOT" = 2026-11-01 ] && exit 3
[ -n "$got" ] && once keys done --scope inv $got
exit 0`

// TestSequenceKeyLeftPendingBySlotIsUnknownToNext: a backfill runs its slots under one lease and one
// fencing token; a key the first slot's run claimed --pending and left (it failed) is unknown to
// the next slot's run — exit 76 and the same line a separate later run gets — not pending under a
// live claimant, which the next slot skipped with exit 0, its work lost without a word. While the
// first slot's run works, its own key reads pending. On every store.
func TestSequenceKeyLeftPendingBySlotIsUnknownToNext(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := keysEnv(t).atVolume()
			e.vars = append(e.vars, "ONCE_STORE="+b.isolated())
			dir := t.TempDir()
			dirVar := []string{"DIR=" + dir}
			r := e.runIn("", dirVar, "backfill", "--task", "bf", "--per", "day", "--from", "2026-11-01", "--to", "2026-11-03",
				"--keep-going", "--", "sh", "-c", seqClaimJob)
			log, errs := readFile(t, filepath.Join(dir, "log")), readFile(t, filepath.Join(dir, "err"))
			if r.code != 3 {
				t.Fatalf("backfill: exit %d, want 3 (the first slot's); log:\n%s\nstderr: %s", r.code, log, r.stderr)
			}
			want := []string{"2026-11-01 rc=0 got=march", "2026-11-02 rc=76 got=", "2026-11-03 rc=76 got="}
			var got []string
			for _, l := range lines(log) {
				if !strings.HasPrefix(l, "{") {
					got = append(got, l)
				}
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("the slots' claims:\n%s\nwant:\n%s\nstderr of the claims:\n%s", log, strings.Join(want, "\n"), errs)
			}
			if !strings.Contains(log, `"key":"march","state":"pending"`) {
				t.Fatalf("the first slot's own claim, while it ran, did not read pending:\n%s", log)
			}
			unknown := lines(errs)
			if len(unknown) != 4 || unknown[0] != unknown[2] || !strings.Contains(unknown[0], `key "march" in scope "inv" is unknown: left pending by run`) {
				t.Fatalf("stderr of the later slots' claims:\n%s\nwant the unknown key and the review line, twice", errs)
			}
			// A separate run, under a new token, gets the same exit status and line.
			if err := os.Remove(filepath.Join(dir, "err")); err != nil {
				t.Fatal(err)
			}
			r = e.runIn("", dirVar, "run", "--task", "bf", "--slot", "2026-11-04", "--", "sh", "-c", seqClaimJob)
			if sep := lines(readFile(t, filepath.Join(dir, "err"))); r.code != 76 || len(sep) != 2 || sep[0] != unknown[0] || sep[1] != unknown[1] {
				t.Fatalf("a separate run: exit %d, stderr %q; want 76 and the lines the backfill's slots got: %q", r.code, sep, unknown[:2])
			}
		})
	}
}
