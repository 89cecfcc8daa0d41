package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A one-node daemon stopped (SIGTERM: a drain; SIGKILL: none) while a buffer-one slot waits behind
// a running one and the slot after it was recorded skipped: the waiting slot had no record, and
// the next start, which walked only the slots after the newest recorded one (the skip), never saw
// it. Restarted, the daemon runs it now (catch-up window), once; on every store.
func TestDaemonQueuedSlotAtAStop(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(sig.String(), func(t *testing.T) { daemonQueuedAtStop(t, b, sig) })
		}
	})
}

func daemonQueuedAtStop(t *testing.T, b backend, sig syscall.Signal) {
	dsn, dir := b.isolated(), t.TempDir()
	// The first run lasts 5 s: the slot 2 s after it waits (buffer-one), the one 4 s after is skipped.
	script := fmt.Sprintf(`echo "$ONCE_SLOT" >> %[1]s/ran; if mkdir %[1]s/first 2>/dev/null; then sleep 5; fi`, dir)
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"bq\"\nschedule = \"@every 2s\"\ntz = \"UTC\"\nttl = \"3s\"\noverlap = \"buffer-one\"\ncatch-up = \"1m\"\ncatch-up-max = 10\ncommand = %q\n", script))
	h := host(t, "node-a", dsn).atVolume()
	d := startDaemon(t, h, "node-a", "--jobs", jobs)
	ranPath := filepath.Join(dir, "ran")
	waitLines(t, ranPath, 1, 20*time.Second)
	v := fileLines(t, ranPath)[0]
	vt, err := time.Parse(time.RFC3339, v)
	if err != nil {
		t.Fatalf("slot %q: %v", v, err)
	}
	const layout = "2006-01-02T15:04:05-07:00" // a slot's spelling: +00:00 in UTC
	w := vt.Add(2 * time.Second).Format(layout)
	x := vt.Add(4 * time.Second).Format(layout)
	slotEntries := func(sl string) []string {
		var out []string
		for _, e := range h.history("bq") {
			if e["slot"] == sl {
				out = append(out, e["state"].(string))
			}
		}
		return out
	}
	for deadline := time.Now().Add(15 * time.Second); len(slotEntries(x)) == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	d.stop(sig, 30*time.Second)
	if got := slotEntries(w); len(got) > 0 || strings.Contains(string(must(os.ReadFile(ranPath))), w+"\n") {
		t.Skipf("slot %s has a record before the restart (%v): the daemon did not queue it (a loaded machine)", w, got)
	}
	d = startDaemon(t, h, "node-a", "--jobs", jobs)
	for deadline := time.Now().Add(30 * time.Second); len(slotEntries(w)) == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	d.stop(syscall.SIGTERM, 30*time.Second)
	seen := map[string]int{}
	for _, sl := range fileLines(t, ranPath) {
		if seen[sl]++; seen[sl] > 1 {
			t.Errorf("slot %s ran twice", sl)
		}
	}
	if got := slotEntries(w); seen[w] != 1 || len(got) != 1 || got[0] != "succeeded" {
		t.Fatalf("slot %s, waiting behind %s when the daemon stopped (%v): ran %d times, history %v; want it run once on the restart",
			w, v, sig, seen[w], got)
	}
}
