package once

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

type exitErr int

func (e exitErr) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitErr) ExitCode() int { return int(e) }

// The outcome mapping, case by case: what the work returned and whether the lease was lost →
// the recorded state, exit code and note.
func TestOutcome(t *testing.T) {
	lost := fmt.Errorf("%w: renewals failed", lease.ErrLost)
	const stopped = "stopped because the lease was lost; whether the work happened is unknown"
	for _, c := range []struct {
		name       string
		werr, lost error
		state      store.State
		code       int
		note       string
	}{
		{"nil", nil, nil, store.Succeeded, 0, ""},
		{"exit 0", exitErr(0), nil, store.Succeeded, 0, ""},
		{"exit 3", exitErr(3), nil, store.Failed, 3, ""},
		{"wrapped exit 4", fmt.Errorf("ran: %w", exitErr(4)), nil, store.Failed, 4, ""},
		{"plain error", errors.New("boom"), nil, store.Failed, 1, "boom"},
		{"exit -1", exitErr(-1), nil, store.Failed, -1, ""},
		{"success, lease lost after", nil, lost, store.Succeeded, 0, lost.Error()},
		{"exit 0, lease lost", exitErr(0), lost, store.Succeeded, 0, lost.Error()},
		{"exit 143, lease lost", exitErr(143), lost, store.Unknown, 143, lost.Error() + "; " + stopped},
		{"error, lease lost", errors.New("context canceled"), lost, store.Unknown, 1, "context canceled; " + lost.Error() + "; " + stopped},
		// Work that returned its context's cause (the loss) names it once.
		{"the loss returned, lease lost", lost, lost, store.Unknown, 1, lost.Error() + "; " + stopped},
	} {
		out := outcome(c.werr, c.lost)
		if out.State != c.state || out.ExitCode == nil || *out.ExitCode != c.code || out.Note != c.note {
			code := "nil"
			if out.ExitCode != nil {
				code = fmt.Sprint(*out.ExitCode)
			}
			t.Errorf("%s: %s, exit %s, note %q; want %s, exit %d, note %q", c.name, out.State, code, out.Note, c.state, c.code, c.note)
		}
	}
	if wide := int64(1) << 40; strconv.IntSize == 64 { // an int of 32 bits cannot hold it
		// No store keeps more than 32 bits (store.Outcome.Check): the outcome is still recorded.
		out := outcome(exitErr(wide), nil)
		if out.State != store.Failed || *out.ExitCode != 1 || out.Note != "exit code 1099511627776 is beyond 32 bits: recorded as 1" {
			t.Errorf("exit 2^40: %s, exit %d, note %q", out.State, *out.ExitCode, out.Note)
		}
		if out := outcome(exitErr(-wide), lost); out.Check() != nil {
			t.Errorf("exit -2^40: the outcome is refused by the stores: %v", out.Check())
		}
	}
	for _, werr := range []error{nil, errors.New("\x00\xff"), exitErr(128 + 9)} {
		if out := outcome(werr, lost); out.Check() != nil {
			t.Errorf("%v: the outcome is refused by the stores: %v", werr, out.Check())
		}
	}
	long := outcome(errors.New(strings.Repeat("x", 3*store.MaxNoteLen)), nil)
	if len(long.Note) > store.MaxNoteLen {
		t.Errorf("a long work error's note is %d bytes, over store.MaxNoteLen", len(long.Note))
	}
}
