package chaos

import (
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// MutexInput is one lease operation for the porcupine mutex model: Client acquires or releases.
type MutexInput struct {
	Acquire bool
	Client  int
}

// MutexModel is a lock whose state is its holder (or -1): an acquire is legal only when free, a
// release only by the holder.
var MutexModel = porcupine.Model{
	Init: func() any { return -1 },
	Step: func(state, input, _ any) (bool, any) {
		in, holder := input.(MutexInput), state.(int)
		if in.Acquire {
			return holder == -1, in.Client
		}
		return holder == in.Client, -1
	},
}

// faulted reports whether the fault can leave proc's lease to expire on its own (so its release
// may happen any time after the fault, even after the process is gone).
func faulted(f Fault, proc string) bool {
	switch f {
	case FaultRestart:
		return true
	case FaultKillOnce, FaultReview, FaultPauseShort, FaultPauseLong, FaultCut, FaultBlackhole:
		return proc == "A"
	}
	return false
}

// checkMutex builds the acquire/release history of a trial's executions and checks it with
// porcupine. Acquire: from the once process's launch to the witness's entry (the lease is held
// by then). Release: from the witness's last record to the once process's exit (it releases before
// exiting); for a holder the fault hit, from the fault (or its entry, if later) to the end of the
// trial, since its lease may only expire in the store.
func checkMutex(execs []*execution, procs map[string]*proc, f Fault, faultAt, end time.Time) bool {
	var ops []porcupine.Operation
	for i, e := range execs {
		p := procs[e.proc]
		if p == nil || e.entrySeq < 0 {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: i, Input: MutexInput{Acquire: true, Client: i},
			Call: p.start.UnixNano(), Return: e.entry.Time})
		rel := porcupine.Operation{ClientId: i, Input: MutexInput{Client: i}, Call: e.last, Return: p.end.UnixNano()}
		if faulted(f, e.proc) || p.end.IsZero() {
			rel.Call = max(e.entry.Time, faultAt.UnixNano())
			rel.Return = max(end.UnixNano(), rel.Call) + 1
			if p.end.IsZero() {
				rel.Return = math.MaxInt64
			}
		}
		ops = append(ops, rel)
	}
	return porcupine.CheckOperationsTimeout(MutexModel, ops, 10*time.Second) != porcupine.Illegal
}
