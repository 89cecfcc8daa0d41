package storetest

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testInspect: once doctor prints what Inspect returns as it is, so every finding must be one it
// can print: a check name, a known level, a one-line message (and command) that does not carry the
// DSN's password. Doctor reports a store's durability only through Inspect, so there is a
// "durability" finding. Inspect only reads: the leases, the waiting slots and the history are the
// same after it, and it answers while a lease is held and an attempt runs.
func testInspect(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	in := b.(store.Inspector)
	ctx := ctxT(t)
	var password string
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		password, _ = u.User.Password()
	}
	inspect := func(when string) {
		t.Helper()
		fs, err := in.Inspect(ctx)
		if err != nil {
			t.Fatalf("Inspect %s: %v", when, err)
		}
		durability := false
		for _, f := range fs {
			t.Logf("%s: %s %s: %s", when, f.Level, f.Check, f.Message)
			checkFinding(t, when, f, password)
			durability = durability || f.Check == "durability"
		}
		if !durability {
			t.Errorf("Inspect %s: no finding of check \"durability\" among %+v", when, fs)
		}
	}
	inspect("on an empty store")

	l := acquire(t, a, "job", "a", time.Minute)
	begin(t, a, l, "d1", "r1", 1)
	finish(t, a, "r1", l.Token, store.Unknown, 143)
	begin(t, a, l, "d2", "r2", 1)
	before := snapshot(t, a)
	inspect("with a lease held and an attempt running")
	if after := snapshot(t, a); !reflect.DeepEqual(after, before) {
		t.Fatalf("Inspect changed the store:\nbefore %+v\n after %+v", before, after)
	}
	finish(t, a, "r2", l.Token, store.Succeeded, 0)
}

// checkFinding fails t when f is not a finding once doctor can print.
func checkFinding(t *testing.T, when string, f store.Finding, password string) {
	t.Helper()
	switch f.Level {
	case store.LevelOK, store.LevelInfo, store.LevelWarn, store.LevelFail:
	default:
		t.Errorf("Inspect %s: finding %+v has level %q, not one of ok, info, warn, fail", when, f, f.Level)
	}
	if f.Check == "" || strings.ContainsAny(f.Check, " \n") {
		t.Errorf("Inspect %s: finding %+v: the check is not one word", when, f)
	}
	if f.Message == "" || strings.Contains(f.Message, "\n") || strings.Contains(f.Command, "\n") {
		t.Errorf("Inspect %s: finding %+v: the message is empty or the message or command is not one line", when, f)
	}
	if password != "" && (strings.Contains(f.Message, password) || strings.Contains(f.Command, password)) {
		t.Errorf("Inspect %s: finding of check %q carries the DSN's password", when, f.Check)
	}
}

// storeView is what a reader of the store sees: leases, waiting slots, history.
type storeView struct {
	Leases  []store.Lease
	Waiting []string
	History string
}

func snapshot(t *testing.T, s store.Store) storeView {
	t.Helper()
	ls, err := s.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	for i := range ls { // compared by value: the times' monotonic readings differ
		ls[i].Acquired, ls[i].Expires = ls[i].Acquired.UTC().Round(0), ls[i].Expires.UTC().Round(0)
	}
	ws, err := s.Waiting(ctxT(t))
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	v := storeView{Leases: ls, History: entryRuns(history(t, s, store.HistoryQuery{}))}
	for _, w := range ws {
		v.Waiting = append(v.Waiting, w.Task+"/"+w.Slot)
	}
	return v
}
