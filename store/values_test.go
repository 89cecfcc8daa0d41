package store

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// wide is n as a value, not a constant: its int conversion compiles where an int has 32 bits.
func wide(n int64) int64 { return n }

// TestValuesAWriteTakes: the shared rules of values.go take what once writes (the limits
// included) and refuse the rest with ErrInvalid, in one line naming the field.
func TestValuesAWriteTakes(t *testing.T) {
	ok := []error{
		AcquireRequest{Task: "job", Holder: "alice@host:1", RunID: ""}.Check(),
		AcquireRequest{Task: strings.Repeat("t", MaxTaskLen), Holder: strings.Repeat("€", MaxHolderLen/3), RunID: strings.Repeat("r", MaxRunIDLen)}.Check(),
		Attempt{Task: "job", Slot: "", RunID: "r", Number: math.MaxInt32, Limit: MaxLimit, Note: "two\nlines\x1b[2J"}.Check(),
		CheckEvent(Event{Task: "job", Kind: Missed}),
		Outcome{State: Failed}.Check(),
		Report{Progress: "1/2"}.Check(),
		ResolveRequest{Task: "job\x00", Slot: "\xff", As: Failed}.Check(), // an older once's slot
	}
	bad := map[string]error{
		"holder":         AcquireRequest{Task: "job", Holder: "host\xff"}.Check(),
		"run id":         AcquireRequest{Task: "job", Holder: "h", RunID: "r\n"}.Check(),
		"task":           AcquireRequest{Task: "", Holder: "h"}.Check(),
		"slot":           Attempt{Task: "job", Slot: "a\u202eb", RunID: "r"}.Check(),
		"attempt number": Attempt{Task: "job", RunID: "r", Number: -1}.Check(),
		"limit":          Attempt{Task: "job", RunID: "r", Limit: MaxLimit + 1}.Check(),
		"event token":    CheckEvent(Event{Task: "job", Kind: Busy, Token: -1}),
		"checkpoint":     Report{Checkpoint: "a\x00"}.Check(),
		"resolved by":    ResolveRequest{As: Failed, By: "b\tc"}.Check(),
	}
	if strconv.IntSize == 64 { // an int of 32 bits holds neither
		most, big := int(wide(MaxNumber)), int(wide(1<<40))
		ok = append(ok, Attempt{Task: "job", RunID: "r", Number: most}.Check())
		bad["event attempt"] = CheckEvent(Event{Task: "job", Kind: Busy, Attempt: most + 1})
		bad["exit code"] = Outcome{State: Failed, ExitCode: &big}.Check()
	}
	for i, err := range ok {
		if err != nil {
			t.Errorf("%d: %v", i, err)
		}
	}
	for field, err := range bad {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", field, err)
		}
	}
	if err := CheckEvent(Event{Task: "job", Kind: Running}); !errors.Is(err, ErrConflict) {
		t.Errorf("an event of kind running: %v, want ErrConflict", err)
	}
}
