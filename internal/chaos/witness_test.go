package chaos

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// startWitness runs the witness directly (no once), as if once had granted token tok.
func startWitness(t *testing.T, dir, proc string, tok int64, sleep time.Duration) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe)
	c.Env = []string{EnvWitness + "=1", EnvDir + "=" + dir, EnvProc + "=" + proc, EnvWrites + "=3",
		EnvSleep + "=" + strconv.FormatInt(sleep.Milliseconds(), 10), "ONCE_FENCING_TOKEN=" + strconv.FormatInt(tok, 10),
		"ONCE_RUN_ID=run-" + proc, "ONCE_SLOT=s", "ONCE_ATTEMPT=1"}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// The checks must catch what they claim to: two executions at once (the second with a lower
// token, as a lock that granted twice would) and a reused token.
func TestWitnessCatchesOverlapAndStaleWrites(t *testing.T) {
	dir := t.TempDir()
	// A holds the kernel lock until B has run (B's start can take longer than any short sleep
	// of A's under load: CI saw A exit first, and no overlap); then A is stopped.
	first := startWitness(t, dir, "A", 5, time.Minute)
	if _, err := waitRecord(t.Context(), dir, 5*time.Second, func(r Record) bool { return r.Proc == "A" && r.Kind == KindEntry }); err != nil {
		t.Fatal(err)
	}
	second := startWitness(t, dir, "B", 3, 100*time.Millisecond)
	if err := second.Wait(); err == nil {
		t.Fatal("the witness with a rejected token exited 0, want 3")
	}
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); first.ProcessState.ExitCode() != 143 {
		t.Fatalf("the first witness on SIGTERM: %v, want exit 143", err)
	}
	third := startWitness(t, dir, "C", 5, 50*time.Millisecond) // a reused token
	if err := third.Wait(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	var o Outcome
	analyze(&o, recs, nil, FaultNone, time.Now(), time.Time{}, time.Now())
	if o.Overlaps != 1 {
		t.Errorf("overlaps %d, want 1: %v", o.Overlaps, o.Problems)
	}
	if o.StaleAccepted == 0 || o.TokenOrder != 2 {
		t.Errorf("stale accepted %d (want > 0), token order violations %d (want 2): %v", o.StaleAccepted, o.TokenOrder, o.Problems)
	}
	for _, r := range recs {
		if r.Proc == "B" && (r.Kind == KindWrite || r.Kind == KindEntry) && r.OK {
			t.Errorf("the register accepted token 3 after 5: %+v", r)
		}
	}
}

// Porcupine must reject two holders whose acquire and release intervals cannot be ordered.
func TestMutexModelRejectsDoubleGrant(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	execs := []*execution{
		{run: "a", proc: "A", entry: Record{Time: ms(10)}, last: ms(100)},
		{run: "b", proc: "B", entry: Record{Time: ms(20)}, last: ms(110)},
	}
	procs := map[string]*proc{
		"A": {start: time.Unix(0, ms(0)), end: time.Unix(0, ms(120))},
		"B": {start: time.Unix(0, ms(5)), end: time.Unix(0, ms(130))},
	}
	if checkMutex(execs, procs, FaultNone, time.Unix(0, 0), time.Unix(0, ms(200))) {
		t.Fatal("overlapping grants judged linearizable")
	}
	procs["B"].start = time.Unix(0, ms(105))
	execs[1].entry.Time = ms(115)
	if !checkMutex(execs, procs, FaultNone, time.Unix(0, 0), time.Unix(0, ms(200))) {
		t.Fatal("sequential grants judged not linearizable")
	}
}

func FuzzParseLog(f *testing.F) {
	f.Add([]byte(`{"k":"entry","proc":"A","run":"r","slot":"s","att":1,"tok":3,"pid":9,"ok":true,"max":0,"t":1}` + "\n"))
	f.Add([]byte("{}\n{\"k\":\"exit\"}\n"))
	f.Add([]byte("not json\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ParseLog(bytes.NewReader(b))
		if err == nil && len(recs) > bytes.Count(b, []byte("\n"))+1 {
			t.Fatalf("%d records from %d lines", len(recs), bytes.Count(b, []byte("\n"))+1)
		}
	})
}
