package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// What a trial found: the witness log checked against the faults (analyze) and the waits it uses.

type execution struct {
	run, proc string
	token     int64
	entry     Record
	entrySeq  int
	last      int64
	completed bool // exit record and every write accepted
	allOK     bool
}

// analyze checks the witness log of one trial and fills the outcome.
func analyze(out *Outcome, recs []Record, procs []*proc, f Fault, faultAt, resolved, end time.Time) {
	execs, order := executions(recs)
	out.Executions = len(order)
	entries := checkTokens(out, recs, execs)
	checkStale(out, recs, entries)
	checkOverlaps(out, recs, f)
	// Review: nothing may run between the unknown (A's death) and the resolution.
	if f == FaultReview {
		for _, e := range order {
			if e.proc != "A" && e.entrySeq >= 0 && e.entry.Time < resolved.UnixNano() {
				out.ReviewBroken++
				out.problem("review: run %s (proc %s) ran after an unknown outcome before it was resolved", e.run, e.proc)
			}
		}
	}
	// Lost slot: some execution must have completed with every write accepted.
	done := false
	for _, e := range order {
		done = done || e.completed
	}
	if !done {
		out.Lost = true
		out.problem("lost slot: no execution completed with all writes accepted")
	}
	if f == FaultKillOnce {
		for _, e := range entries {
			if e.proc != "A" {
				out.Takeover = time.Duration(e.entry.Time - faultAt.UnixNano())
				break
			}
		}
	}
	byID := map[string]*proc{}
	for _, p := range procs {
		byID[p.id] = p
	}
	out.Linearizable = checkMutex(order, byID, f, faultAt, end)
	if !out.Linearizable {
		out.problem("porcupine: the acquire/release history is not linearizable as a mutex")
	}
}

// executions groups the witness records by run, in the order runs first appear.
func executions(recs []Record) (map[string]*execution, []*execution) {
	execs := map[string]*execution{}
	var order []*execution
	for i, rec := range recs {
		e := execs[rec.RunID]
		if e == nil {
			e = &execution{run: rec.RunID, proc: rec.Proc, token: rec.Token, entrySeq: -1, allOK: true}
			execs[rec.RunID] = e
			order = append(order, e)
		}
		e.last = rec.Time
		switch rec.Kind {
		case KindEntry:
			e.entry, e.entrySeq = rec, i
		case KindExit:
			e.completed = e.allOK
		}
		if rec.Kind == KindEntry || rec.Kind == KindWrite {
			e.allOK = e.allOK && rec.OK
		}
	}
	return execs, order
}

// checkTokens: entries in register order must carry strictly increasing tokens. It returns the
// executions in the order they entered.
func checkTokens(out *Outcome, recs []Record, execs map[string]*execution) []*execution {
	var prev int64 = -1 << 62
	var entries []*execution
	for _, rec := range recs {
		if rec.Kind == KindEntry {
			if rec.Token <= prev {
				out.TokenOrder++
				out.problem("token order: entry of %s (proc %s) has token %d, not above the highest earlier entry token %d", rec.RunID, rec.Proc, rec.Token, prev)
			}
			prev = max(prev, rec.Token)
			entries = append(entries, execs[rec.RunID])
		}
	}
	return entries
}

// checkStale: no write may be accepted after another execution with an equal or higher token entered.
func checkStale(out *Outcome, recs []Record, entries []*execution) {
	for i, rec := range recs {
		if (rec.Kind != KindWrite && rec.Kind != KindEntry) || !rec.OK {
			continue
		}
		for _, e := range entries {
			if e.entrySeq < i && e.run != rec.RunID && e.token >= rec.Token {
				out.StaleAccepted++
				out.problem("stale write accepted: run %s token %d after run %s token %d entered", rec.RunID, rec.Token, e.run, e.token)
				break
			}
		}
	}
}

// checkOverlaps: an overlap is excused only for a paused stale holder whose writes after the
// overlap were all rejected.
func checkOverlaps(out *Outcome, recs []Record, f Fault) {
	for i, rec := range recs {
		if rec.Kind != KindOverlap {
			continue
		}
		excused := f == FaultPauseLong
		for _, w := range recs[i+1:] {
			if w.Proc == "A" && (w.Kind == KindWrite || w.Kind == KindEntry) && w.OK {
				excused = false
			}
		}
		if excused {
			out.Excused++
		} else {
			out.Overlaps++
			out.problem("overlap: run %s (proc %s, token %d) started while another execution was running", rec.RunID, rec.Proc, rec.Token)
		}
	}
}

func waitRecord(ctx context.Context, dir string, d time.Duration, match func(Record) bool) (Record, error) {
	deadline := time.Now().Add(d)
	for {
		recs, err := ReadLog(dir)
		if err != nil {
			return Record{}, err
		}
		for _, rec := range recs {
			if match(rec) {
				return rec, nil
			}
		}
		if time.Now().After(deadline) {
			return Record{}, fmt.Errorf("no such witness record within %s", d)
		}
		select {
		case <-ctx.Done():
			return Record{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitDead polls until pid is gone or a zombie, and returns when it saw that.
func waitDead(pid int, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Now()
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func ctl(ctx context.Context, script, verb string) error {
	if script == "" {
		return errors.New("chaos: store restart needs the server's control script (ONCE_TEST_*_CTL)")
	}
	out, err := exec.CommandContext(ctx, script, verb).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: %s %s: %w: %s", script, verb, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2500 {
		s = "…" + s[len(s)-2500:]
	}
	return s
}
