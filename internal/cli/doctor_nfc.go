package cli

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/store"
)

// slotForms reports the slots of hist whose value is not in Unicode NFC, which an older once took
// ("cafe\u0301", as macOS writes "café"): INFO, since a new run in one is now refused (64) and its
// NFC form is another slot; WARN when the same text was a slot in more than one encoding: those
// were distinct slots, and the work ran in each.
func slotForms(hist []store.Entry, r *report) {
	type text struct{ task, nfc string }
	forms := map[text][]string{} // the encodings seen of each task's slot text
	var order []text
	for _, e := range hist {
		if e.Slot == "" || isASCII(e.Slot) { // ASCII is NFC
			continue
		}
		k := text{e.Task, norm.NFC.String(e.Slot)}
		if forms[k] == nil {
			order = append(order, k)
		}
		if !slices.Contains(forms[k], e.Slot) {
			forms[k] = append(forms[k], e.Slot)
		}
	}
	for _, k := range order {
		fs := forms[k]
		if !slices.ContainsFunc(fs, func(s string) bool { return s != k.nfc }) {
			continue
		}
		if len(fs) > 1 {
			r.add("unicode", store.LevelWarn, k.task, "slot %q was %d slots, one per encoding (%s): the work ran in each; an older once took slot values not in Unicode NFC, once now refuses them (see once history %s)",
				k.nfc, len(fs), quoteEach(fs), shell.Flag("task", k.task))
			continue
		}
		r.add("unicode", store.LevelInfo, k.task, "slot %+q is not in Unicode NFC (an older once took it): a new run in it is refused (64), and its NFC form %q is another slot: before a script switches to that, see whether this one ran (once history %s %s)",
			fs[0], k.nfc, shell.Flag("task", k.task), shell.Flag("slot", fs[0]))
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// quoteEach is xs quoted with %+q, non-ASCII runes escaped, so that encodings that print alike differ.
func quoteEach(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%+q", x)
	}
	return strings.Join(q, ", ")
}
