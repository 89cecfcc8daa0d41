package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// TestDoctorReportsUnknownKeys: business keys left unknown (claimed two-phase by a run that ended
// without once keys done) showed only when they were claimed again; once doctor now names them per
// scope, with the command that marks those that happened done, and the command pasted as printed
// settles them. A scope with more unknown keys than it names reads them from happened.txt, which the
// person writes: pasted before, the command fails in the shell and claims nothing (a placeholder
// KEY… was claimed done as a key of its own).
func TestDoctorReportsUnknownKeys(t *testing.T) {
	e := newEnv(t)
	claim := fmt.Sprintf(`%[1]s keys claim --scope payments --pending -- pay-1 'pay 2' pay-3 --help >/dev/null && %[1]s keys done --scope payments pay-3 &&
		%[1]s keys claim --scope refunds --pending r1 r2 r3 r4 r5 r6 r7 >/dev/null`, e.bin)
	if r := e.run("run", "--task", "charge", "--slot", "s1", "--", "sh", "-c", claim); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	if r := e.run("keys", "claim", "--scope", "orders", "o-1"); r.code != 0 {
		t.Fatalf("keys claim: %d %s", r.code, r.stderr)
	}
	var rep struct {
		Healthy  bool
		Findings []store.Finding
	}
	r := e.run("doctor", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.Healthy {
		t.Fatalf("doctor: %d, want 1 (problems found): %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	var keys []store.Finding
	for _, f := range rep.Findings {
		if f.Check == "keys" {
			keys = append(keys, f)
		}
	}
	if len(keys) != 2 {
		t.Fatalf("doctor: keys findings %+v, want one for payments and one for refunds", keys)
	}
	pay, ref := keys[0], keys[1]
	// --help is a key (an id may start with -): the pasted command takes it as one, after --.
	if !strings.HasPrefix(pay.Message, "scope payments: 3 keys unknown (--help 'pay 2' pay-1):") || pay.Level != store.LevelWarn ||
		!strings.HasPrefix(pay.Command, "once keys claim --scope payments --reclaim-unknown --store sqlite://") ||
		!strings.HasSuffix(pay.Command, " -- --help 'pay 2' pay-1") {
		t.Errorf("doctor: payments: %+v", pay)
	}
	if !strings.HasPrefix(ref.Message, "scope refunds: 7 keys unknown (the first: r1 r2 r3 r4 r5):") || !strings.HasPrefix(ref.Command, "once keys claim --scope refunds --reclaim-unknown --store ") || !strings.HasSuffix(ref.Command, " -- < happened.txt") {
		t.Errorf("doctor: refunds: %+v", ref)
	}
	if t.Failed() {
		t.FailNow()
	}
	// The person checked downstream: every one happened. The command as printed, then the rest.
	pasted := exec.Command("sh", "-c", pay.Command)
	pasted.Env = append(slices.Clip(e.vars), "PATH="+filepath.Dir(e.bin)+":"+os.Getenv("PATH"))
	if out, err := pasted.CombinedOutput(); err != nil {
		t.Fatalf("the pasted %s: %v\n%s", pay.Command, err, out)
	}
	if r := e.run("keys", "status", "--scope", "payments", "--json", "--", "--help", "pay 2", "pay-1"); r.code != 0 || strings.Count(r.stdout, `"state":"done"`) != 3 {
		t.Fatalf("keys status after the paste: %d, want the 3 keys done\n%s%s", r.code, r.stdout, r.stderr)
	}
	// refunds' command pasted before happened.txt is written: the shell refuses it, nothing is claimed.
	dir := t.TempDir()
	early := exec.Command("sh", "-c", ref.Command)
	early.Dir, early.Env = dir, pasted.Env
	if out, err := early.CombinedOutput(); err == nil {
		t.Fatalf("the pasted %s without happened.txt succeeded:\n%s", ref.Command, out)
	}
	if r := e.run("keys", "status", "--scope", "refunds", "--json", "r1", "r2", "r3", "r4", "r5", "r6", "r7"); r.code != 0 || strings.Count(r.stdout, `"state":"unknown"`) != 7 {
		t.Fatalf("keys status after the early paste: %d, want the 7 keys still unknown\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "happened.txt"), []byte("r1\nr2\nr3\nr4\nr5\nr6\nr7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	late := exec.Command("sh", "-c", ref.Command)
	late.Dir, late.Env = dir, pasted.Env
	if out, err := late.CombinedOutput(); err != nil {
		t.Fatalf("the pasted %s with happened.txt: %v\n%s", ref.Command, err, out)
	}
	if r := e.run("doctor"); r.code != 0 || !strings.Contains(r.stdout, "no business key is unknown in 3 scopes") {
		t.Fatalf("doctor after reconciling: %d, want 0 and no unknown key\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestDoctorLeavesTheDaemonsClaimsAlone: a late launch of once daemon claims its slot's keys in
// once.scheduler.recorded pending under its lease, and they read unknown once its run ended, by
// design (docs/daemon.md). Doctor warned about them after every daemon restart (exit 1), telling
// the person to check downstream and mark them done.
func TestDoctorLeavesTheDaemonsClaimsAlone(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "--task", "j1", "--slot", "2026-12-07T06:46:20+00:00", "--", "true"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	// The daemon's claim under that run, which has ended (once keys claim refuses the daemon's
	// scopes: the store's API, as the daemon).
	ctx := context.Background()
	s, err := store.Open(ctx, "sqlite://"+filepath.Join(e.home, "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, store.HistoryQuery{Task: "j1"})
	if err != nil || len(h) != 1 {
		t.Fatalf("history: %v %v", h, err)
	}
	c := store.Claimant{Task: "j1", RunID: h[0].RunID, Token: h[0].Token}
	if _, err := s.(store.Keys).Claim(ctx, store.ClaimRequest{Scope: "once.scheduler.recorded", Keys: []string{"missed j1 2026-12-07T06:46:20+00:00"}, Pending: true, Claimant: c}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if r := e.run("keys", "status", "--scope", "once.scheduler.recorded", "missed j1 2026-12-07T06:46:20+00:00"); !strings.Contains(r.stdout, "unknown") {
		t.Fatalf("the claim under the ended run: %s%s; want unknown", r.stdout, r.stderr)
	}
	r := e.run("doctor", "--json")
	if strings.Contains(r.stdout, "once.scheduler.recorded") || !strings.Contains(r.stdout, `"check": "keys"`) {
		t.Fatalf("doctor: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestPastedResolveOfADashTask: once run takes a task named --as (not a flag of run), and the
// resolve lines status printed for it (once resolve --task --as …) were refused (64) however
// written: its slot could not be decided from the command line.
func TestPastedResolveOfADashTask(t *testing.T) {
	e := newEnv(t)
	for range 2 {
		e.run("run", "--task=--as", "--slot", "-1", "--max-attempts", "1", "--", "false")
	}
	var st struct {
		Review []struct{ Resolve struct{ Failed string } }
	}
	r := e.run("status", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Review) != 1 {
		t.Fatalf("status: %v\n%s%s", err, r.stdout, r.stderr)
	}
	pasted := exec.Command("sh", "-c", st.Review[0].Resolve.Failed)
	pasted.Env = append(slices.Clip(e.vars), "PATH="+filepath.Dir(e.bin)+":"+os.Getenv("PATH"))
	if out, err := pasted.CombinedOutput(); err != nil {
		t.Fatalf("the pasted %s: %v\n%s", st.Review[0].Resolve.Failed, err, out)
	}
}
