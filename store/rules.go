package store

import "fmt"

// JoinNote is the one way an attempt's notes are joined: the note reported during the run (once
// report --note) and the outcome's note, in that order, "; " between them, either may be empty.
func JoinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Apply sets on a what r reports: the count when given, and each text that is not empty; the rest
// of a is left as it is (Ledger.Report).
func (r Report) Apply(a *Attempt) {
	if r.Records != nil {
		a.Records = *r.Records
	}
	if r.Progress != "" {
		a.Progress = r.Progress
	}
	if r.Checkpoint != "" {
		a.Checkpoint = r.Checkpoint
	}
	if r.Note != "" {
		a.Note = r.Note
	}
}

// MaxScopeLen bounds a key scope (store.Keys) in bytes, on every store: the SQL stores' column.
const MaxScopeLen = 200

// CheckScope is the one rule for a key scope every store.Keys applies before it touches the
// store: 1 to MaxScopeLen bytes. Errors wrap ErrInvalid; backends prefix them with their name.
func CheckScope(scope string) error {
	if scope == "" || len(scope) > MaxScopeLen {
		return &invalidValue{fmt.Sprintf("key scope %q must be 1 to %d bytes", scope, MaxScopeLen)}
	}
	return nil
}

// MaxKeyResult bounds the result Keys.Complete stores with a key (idemhttp's stored response): every
// store keeps one of this size. ZooKeeper refuses a node over about 1 MB and etcd a request over
// 1.5 MiB, and the key-value stores keep the result base64-encoded in the key's JSON record.
const MaxKeyResult = 512 << 10

// CheckKeyResult refuses (ErrInvalid) a result over MaxKeyResult bytes, before anything is written:
// a store that failed on it while writing left the key pending, to be executed again once its
// claimant was gone.
func CheckKeyResult(result []byte) error {
	if len(result) > MaxKeyResult {
		return &invalidValue{fmt.Sprintf("key result is %d bytes: the limit is %d bytes on every store", len(result), MaxKeyResult)}
	}
	return nil
}

// Concurrent reports whether attempts a and b of one task may run at the same time: both run under
// seats (Attempt.Limit 2 or more) and are of different slots. Any other two attempts of a task
// whose times overlap are what once exists to prevent: once doctor's OVERLAP, the timeline's marks.
func Concurrent(a, b Attempt) bool { return a.Limit >= 2 && b.Limit >= 2 && a.Slot != b.Slot }
