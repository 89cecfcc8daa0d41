package store

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// The one rule for what a library caller hands a store to write, applied by every backend before
// it writes (AcquireRequest.Check, Attempt.Check, CheckEvent, Outcome.Check, Report.Check,
// ResolveRequest.Check), so that the six stores accept and refuse alike and what is written reads
// back as written: a holder, a run id, a task or a slot is compared byte for byte by later calls
// (Renew, Release, Finish, Slot), and a store that kept it changed (JSON turns invalid UTF-8 into
// U+FFFD; PostgreSQL refuses it) would refuse every renewal of a grant it had just given. The once
// command and package once refuse the same values earlier with their own flag or field names.
// Errors wrap ErrInvalid and name the field; nothing was written. Only new writes are checked:
// what an older once wrote is read as before.

// MaxNumber bounds an attempt number (Attempt.Number, Event.Attempt) and the counts a ledger keeps:
// far above any slot's, and the largest integer a JSON number holds exactly. The key-value stores
// refuse a document holding a larger one as corrupt.
const MaxNumber = 1<<53 - 1

// MaxTaskLen and MaxSlotLen bound a task name and a slot value in bytes on every store: the
// same as once.MaxTaskLen and slot.MaxValueLen, whose stricter syntax the once command applies.
const (
	MaxTaskLen = 200
	MaxSlotLen = 200
)

// checkField is the rule for a string compared byte for byte later (a holder, a run id, a task,
// a slot): at most max bytes of valid UTF-8, every character printable (Printable); empty only
// when !required. field names it in the message.
func checkField(field, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return &invalidValue{fmt.Sprintf("%s is empty: give one", field)}
	case len(s) > max:
		return &invalidValue{fmt.Sprintf("%s %s is %d bytes long: the limit is %d bytes on every store", field, QuoteKey(s), len(s), max)}
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return &invalidValue{fmt.Sprintf("%s %s is not valid UTF-8 at byte %d: a store would not read it back as written, "+
				"and the calls that compare it later would not find it; give text", field, QuoteKey(s), i)}
		}
		if !Printable(r) {
			return &invalidValue{fmt.Sprintf("%s %s has %U at byte %d: use printable characters (no control or formatting characters, tabs or line breaks)",
				field, QuoteKey(s), r, i)}
		}
		i += size
	}
	return nil
}

// checkPlace checks a task (required) and a slot (may be empty: a task without slots).
func checkPlace(task, slot string) error {
	if err := checkField("task", task, MaxTaskLen, true); err != nil {
		return err
	}
	return checkField("slot", slot, MaxSlotLen, false)
}

// checkNumber refuses an attempt number below 0 or above MaxNumber (0: none, or "pick the next").
func checkNumber(field string, n int) error {
	if n < 0 || int64(n) > MaxNumber { // int64: an int of 32 bits cannot hold MaxNumber
		return &invalidValue{fmt.Sprintf("%s %d is out of range: 0 to %d", field, n, int64(MaxNumber))}
	}
	return nil
}

// Check is the rule for an Acquire (and a Start): the task, a holder (required, at most
// MaxHolderLen bytes) and a run id (may be empty, at most MaxRunIDLen bytes), each printable
// UTF-8 (checkField). The TTL and the Limit are each backend's and CheckLimit's.
func (r AcquireRequest) Check() error {
	if err := checkField("task", r.Task, MaxTaskLen, true); err != nil {
		return err
	}
	if err := checkField("holder", r.Holder, MaxHolderLen, true); err != nil {
		return err
	}
	return checkField("run id", r.RunID, MaxRunIDLen, false)
}

// Check is the rule for the attempt a Begin records: the task and slot, a run id (required), a
// holder, an attempt number of 0 (the next) to MaxNumber, a seat's Limit of 0 to MaxLimit, and
// the progress, checkpoint and note within their limits (CheckText). The Token is the fence's
// to judge (ErrNotHeld).
func (a Attempt) Check() error {
	if err := checkPlace(a.Task, a.Slot); err != nil {
		return err
	}
	if err := checkField("run id", a.RunID, MaxRunIDLen, true); err != nil {
		return err
	}
	if err := checkField("holder", a.Holder, MaxHolderLen, false); err != nil {
		return err
	}
	if err := checkNumber("attempt number", a.Number); err != nil {
		return err
	}
	if a.Limit < 0 || a.Limit > MaxLimit {
		return &invalidValue{fmt.Sprintf("attempt of task %q: limit %d is out of range 0..%d", a.Task, a.Limit, MaxLimit)}
	}
	return checkTexts(a.Progress, a.Checkpoint, a.Note)
}

// checkTexts checks a progress, a checkpoint and a note against their limits.
func checkTexts(progress, checkpoint, note string) error {
	if err := CheckText("progress", progress, MaxProgressLen); err != nil {
		return err
	}
	if err := CheckText("checkpoint", checkpoint, MaxCheckpointLen); err != nil {
		return err
	}
	return CheckText("note", note, MaxNoteLen)
}

// checkEventValues is CheckEvent past the kind: the task and slot, a run id and a holder (each may
// be empty), a token of 0 or more, an attempt number of 0 (none) to MaxNumber, and the note.
func checkEventValues(e Event) error {
	if err := checkPlace(e.Task, e.Slot); err != nil {
		return err
	}
	if err := checkField("run id", e.RunID, MaxRunIDLen, false); err != nil {
		return err
	}
	if err := checkField("holder", e.Holder, MaxHolderLen, false); err != nil {
		return err
	}
	if e.Token < 0 {
		return &invalidValue{fmt.Sprintf("event token %d is negative: 0 when no lease was held", e.Token)}
	}
	if err := checkNumber("event attempt", e.Attempt); err != nil {
		return err
	}
	return CheckText("note", e.Note, MaxNoteLen)
}

// Check is the rule for an outcome past its state (which Finish refuses with ErrConflict): an
// exit code the SQL stores' 32-bit column holds, and the note within MaxNoteLen (CheckText).
func (o Outcome) Check() error {
	if o.ExitCode != nil && (*o.ExitCode < math.MinInt32 || *o.ExitCode > math.MaxInt32) {
		return &invalidValue{fmt.Sprintf("exit code %d is out of range: every store keeps 32 bits", *o.ExitCode)}
	}
	return CheckText("note", o.Note, MaxNoteLen)
}

// Check is the rule for a Report: a record count from 0 to MaxNumber (once report refuses a
// negative one; a library caller could store it), the progress, checkpoint and note within their
// limits.
func (r Report) Check() error {
	if r.Records != nil && (*r.Records < 0 || *r.Records > MaxNumber) {
		return &invalidValue{fmt.Sprintf("record count %d is out of range: 0 to %d", *r.Records, int64(MaxNumber))}
	}
	return checkTexts(r.Progress, r.Checkpoint, r.Note)
}

// Check is the rule for a Resolve past its As (refused with ErrConflict): the person (By: may
// be empty, at most MaxByLen bytes, printable) and the note (CheckText). The task and slot are
// not checked: a slot an older once wrote can still be resolved.
func (r ResolveRequest) Check() error {
	if err := checkField("resolved by", r.By, MaxByLen, false); err != nil {
		return err
	}
	return CheckText("note", r.Note, MaxNoteLen)
}
