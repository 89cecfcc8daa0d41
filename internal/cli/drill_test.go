package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The drill's rules, case by case: which launches ran, and what passes, fails or warns.
func TestJudgeLaunches(t *testing.T) {
	end := time.Now()
	ranWith := func(n int, state store.State, code int) *launch {
		return &launch{n: n, entries: []store.Entry{{Attempt: store.Attempt{Number: 1, State: state, ExitCode: &code, EndedAt: &end}}}}
	}
	event := func(n int, kind store.State) *launch {
		return &launch{n: n, entries: []store.Entry{{Attempt: store.Attempt{State: kind, Note: "why"}}}}
	}
	daily := &drillFlags{runFlags: runFlags{per: "day"}}
	noSlot := &drillFlags{}
	for _, c := range []struct {
		name        string
		f           *drillFlags
		launches    []*launch
		ran         int
		fails, warn []string // substrings, in order
	}{
		{"pass", daily, []*launch{ranWith(1, store.Succeeded, 0), event(2, store.Busy), event(3, store.Skipped)}, 1, nil, nil},
		{"both ran", daily, []*launch{ranWith(1, store.Succeeded, 0), ranWith(2, store.Succeeded, 0), event(3, store.Skipped)}, 2,
			[]string{"both simultaneous launches ran"}, nil},
		{"ran again", daily, []*launch{ranWith(1, store.Succeeded, 0), event(2, store.Busy), ranWith(3, store.Succeeded, 0)}, 2,
			[]string{"ran the same slot again"}, nil},
		{"failed command", daily, []*launch{ranWith(1, store.Failed, 2), event(2, store.Busy), event(3, store.Review)}, 1,
			[]string{"launch 1: COMMAND did not succeed (attempt 1, failed, exit 2)"}, nil},
		{"no trace", daily, []*launch{{n: 1, code: 69}, event(2, store.Busy), event(3, store.Skipped)}, 0,
			[]string{"launch 1 left no trace in history (exit 69)"}, []string{"nothing ran"}},
		{"no slot", noSlot, []*launch{ranWith(1, store.Succeeded, 0), event(2, store.Busy), ranWith(3, store.Succeeded, 0)}, 2,
			[]string{"no slot is configured"}, nil},
		{"no slot allowed", &drillFlags{allowNoSlot: true}, []*launch{ranWith(1, store.Succeeded, 0), event(2, store.Busy), ranWith(3, store.Succeeded, 0)}, 2,
			nil, []string{"accepted: --allow-no-slot"}},
		{"no slot, blocked", noSlot, []*launch{ranWith(1, store.Succeeded, 0), event(2, store.Busy), event(3, store.Busy)}, 1,
			nil, []string{"a second launch after the first ended would run again"}},
	} {
		ran, fails, warns := judgeLaunches(c.f, c.launches)
		if len(ran) != c.ran || !matches(fails, c.fails) || !matches(warns, c.warn) {
			t.Errorf("%s: ran %v\nfails %q\nwarns %q", c.name, ran, fails, warns)
		}
	}
}

// matches says whether each line contains its substring, with as many lines as substrings.
func matches(lines, subs []string) bool {
	if len(lines) != len(subs) {
		return false
	}
	for i, s := range subs {
		if !strings.Contains(lines[i], s) {
			return false
		}
	}
	return true
}
