package main

// Regression tests of issue 11, items 3, 6, 8, 9 and 13, through the real binary: empty flag
// values, resolve commands safe to paste, escaped terminal output, one set of text limits on
// every store, bounds and messages.

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// refused checks a 64 with one line starting "once: " that contains want, and nothing run.
func refused(t *testing.T, r result, want string) {
	t.Helper()
	if r.code != 64 {
		t.Errorf("exit %d, want 64; stderr: %s", r.code, r.stderr)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.stderr, "once: ") {
		t.Errorf("want one line starting with 'once: ', got %q", r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not say %q", r.stderr, want)
	}
}

// Item 3: a flag given with an empty value (an unset variable in a crontab) is refused on every
// command instead of meaning "absent": no fallback to the local store, no run without a slot.
func TestEmptyFlagValuesExit64(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := []string{"--", "sh", "-c", "echo x > " + marker}
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"store", []string{"run", "--task", "t", "--store", ""}},
		{"store", []string{"run", "--task", "t", "--store="}},
		{"per", []string{"run", "--task", "t", "--per", ""}},
		{"schedule", []string{"run", "--task", "t", "--schedule", ""}},
		{"slot", []string{"run", "--task", "t", "--slot", ""}},
		{"tz", []string{"run", "--task", "t", "--per", "day", "--tz", ""}},
		{"holder", []string{"run", "--task", "t", "--holder", ""}},
		{"notify", []string{"run", "--task", "t", "--notify", ""}},
		{"on-unknown", []string{"run", "--task", "t", "--on-unknown", ""}},
		{"catch-up", []string{"run", "--task", "t", "--per", "day", "--catch-up", ""}},
		{"from", []string{"backfill", "--task", "t", "--per", "day", "--from", "", "--to", "2026-01-02"}},
		{"slot", []string{"drill", "--task", "t", "--slot", ""}},
		{"store", []string{"status", "--store", ""}},
		{"slot", []string{"history", "--slot", ""}},
		{"store", []string{"doctor", "--store", ""}},
		{"note", []string{"resolve", "--task", "t", "--slot", "s", "--as", "failed", "--note", ""}},
		{"by", []string{"resolve", "--task", "t", "--slot", "s", "--as", "failed", "--by", ""}},
		{"scope", []string{"keys", "claim", "--scope", "", "k1"}},
		{"key", []string{"effect", "--key", ""}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			args := c.args
			switch args[0] {
			case "run", "backfill", "drill", "effect":
				args = append(append([]string{}, args...), cmd...)
			}
			refused(t, e.run(args...), "--"+c.flag+" is given but empty")
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran despite an empty flag value")
	}
	if _, err := os.Stat(filepath.Join(e.home, "once.db")); err == nil {
		t.Fatal("an empty --store fell back to the embedded store: it was created")
	}
	// The documented exception: resolve --slot '' is the slot of a task without slots.
	r := e.run("resolve", "--task", "t", "--slot", "", "--as", "failed")
	if r.code != 64 || strings.Contains(r.stderr, "given but empty") || !strings.Contains(r.stderr, `no attempt in slot ""`) {
		t.Fatalf("resolve --slot '': %d %s", r.code, r.stderr)
	}
}

// paste runs line with sh -c, as a person pasting it into a shell.
func (e *env) paste(line string) result {
	e.t.Helper()
	return e.run0("sh", "-c", line)
}

// run0 runs any program in e's environment.
func (e *env) run0(name string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.Env = e.vars
	return collect(e.t, c)
}

// pasteResolve pastes into a shell the "once resolve … --as failed" line once status prints for the
// slot waiting for review, wants the line to hold want (the slot as status quotes it), and wants
// no slot waiting after it.
func (e *env) pasteResolve(dsn, want string) {
	e.t.Helper()
	st := e.run("status", "--store", dsn)
	var line string
	for _, x := range strings.Split(st.stdout, "\n") {
		if strings.HasPrefix(x, "  once resolve ") && strings.Contains(x, "--as failed") {
			line = strings.TrimSpace(x)
		}
	}
	if !strings.Contains(line, want) {
		e.t.Fatalf("status:\n%s", st.stdout)
	}
	if r := e.paste(line); r.code != 0 {
		e.t.Fatalf("pasted %q: %d %s", line, r.code, r.stderr)
	}
	if r := e.run("status", "--store", dsn); !strings.Contains(r.stdout, "WAITING FOR REVIEW (0)") {
		e.t.Fatalf("still waiting:\n%s", r.stdout)
	}
}

// decisions are the two commands printed for one slot.
type decisions struct{ failed, succeeded string }

// Item 6: every place that prints resolve commands (the 76 message, the WARN log line,
// notifications, status text and JSON, doctor) prints the same two complete lines, quoted, with
// the non-default store and never its password; pasted into sh -c each records exactly the
// decision it names. With a password, the pasted line records nothing and says how to fix it.
func TestPastedResolveCommandsRecordTheirDecision(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dsn := b.isolated()
			e := keysEnv(t) // the once binary on PATH as "once", as in an operator's shell
			hk := &hook{}
			srv := httptest.NewServer(hk)
			defer srv.Close()
			marker := filepath.Join(t.TempDir(), "ran")
			slots := []string{"it's a|b $(id)", "plain-2"}
			printed := map[string][]decisions{}
			var rerun = map[string]string{}
			for _, sl := range slots {
				base := []string{"run", "--store", dsn, "--task", "paste", "--slot", sl, "--max-attempts", "1", "--log-format", "json", "--notify", srv.URL + "/hook", "--"}
				if r := e.run(append(base, "false")...); r.code != 1 {
					t.Fatalf("first run: %d %s", r.code, r.stderr)
				}
				r := e.run(append(base, "true")...)
				if r.code != 76 {
					t.Fatalf("second run: %d, want 76: %s", r.code, r.stderr)
				}
				var d decisions
				for _, line := range strings.Split(r.stderr, "\n") {
					switch {
					case strings.HasPrefix(line, "{"):
						var l map[string]any
						if err := json.Unmarshal([]byte(line), &l); err != nil {
							t.Fatalf("log line %q: %v", line, err)
						}
						if l["msg"] == "needs review" {
							rerun[sl], _ = l["rerun_with"].(string)
						}
					case strings.HasPrefix(line, "  once resolve ") && d.failed == "":
						d.failed = strings.TrimSpace(line)
					case strings.HasPrefix(line, "  once resolve "):
						d.succeeded = strings.TrimSpace(line)
					}
				}
				printed[sl] = append(printed[sl], d)
			}
			var evs []struct {
				Event, Slot string
				Resolve     *struct{ Failed, Succeeded string }
			}
			for _, req := range strings.Split(hk.all(), "\n") {
				if _, body, ok := strings.Cut(req, " {"); ok {
					var ev struct {
						Event, Slot string
						Resolve     *struct{ Failed, Succeeded string }
					}
					if err := json.Unmarshal([]byte("{"+body), &ev); err != nil {
						t.Fatalf("event %q: %v", body, err)
					}
					evs = append(evs, ev)
				}
			}
			for _, ev := range evs {
				if ev.Event == "review" && ev.Resolve != nil {
					printed[ev.Slot] = append(printed[ev.Slot], decisions{ev.Resolve.Failed, ev.Resolve.Succeeded})
				}
			}
			st := e.run("status", "--store", dsn)
			var cur string
			for _, line := range strings.Split(st.stdout, "\n") {
				if strings.HasPrefix(line, "  once resolve ") && strings.Contains(line, "--as failed") {
					cur = strings.TrimSpace(line)
				} else if strings.HasPrefix(line, "  once resolve ") {
					for _, sl := range slots {
						if strings.Contains(cur, shellQuoteTest(sl)) {
							printed[sl] = append(printed[sl], decisions{cur, strings.TrimSpace(line)})
						}
					}
				}
			}
			var sj struct {
				Review []struct {
					Slot    string
					Resolve struct{ Failed, Succeeded string }
				}
			}
			if r := e.run("status", "--store", dsn, "--json"); json.Unmarshal([]byte(r.stdout), &sj) != nil {
				t.Fatalf("status --json: %s", r.stdout)
			}
			for _, w := range sj.Review {
				printed[w.Slot] = append(printed[w.Slot], decisions{w.Resolve.Failed, w.Resolve.Succeeded})
			}
			var dj struct{ Findings []store.Finding }
			if r := e.run("doctor", "--store", dsn, "--json"); json.Unmarshal([]byte(r.stdout), &dj) != nil {
				t.Fatalf("doctor --json: %s", r.stdout)
			}
			dd := map[string]*decisions{}
			for _, f := range dj.Findings {
				if f.Check != "review" || f.Command == "" {
					continue
				}
				for _, sl := range slots {
					if strings.Contains(f.Command, shellQuoteTest(sl)) {
						if dd[sl] == nil {
							dd[sl] = &decisions{}
						}
						if strings.Contains(f.Command, "--as failed") {
							dd[sl].failed = f.Command
						} else {
							dd[sl].succeeded = f.Command
						}
					}
				}
			}
			for sl, d := range dd {
				printed[sl] = append(printed[sl], *d)
			}

			u, _ := url.Parse(dsn)
			password, hasPassword := u.User.Password()
			for _, sl := range slots {
				ds := printed[sl]
				if len(ds) != 5 { // 76 message, notification, status text, status JSON, doctor
					t.Fatalf("slot %q: %d sources of resolve commands, want 5: %+v", sl, len(ds), ds)
				}
				want := ds[0]
				if rerun[sl] != want.failed {
					t.Errorf("slot %q: log rerun_with %q differs from the 76 message %q", sl, rerun[sl], want.failed)
				}
				for _, d := range ds[1:] {
					if d != want {
						t.Errorf("slot %q: sources disagree:\n%+v\n%+v", sl, d, want)
					}
				}
				for _, c := range []string{want.failed, want.succeeded} {
					if !strings.Contains(c, " --store ") || strings.Contains(c, "failed|") || strings.Contains(c, "|succeeded") {
						t.Errorf("printed command %q: want --store, no pipe form", c)
					}
					if hasPassword && strings.Contains(c, password) {
						t.Fatalf("printed command shows the password: %q", c)
					}
				}
			}
			// Paste: slot 0 is done, slot 1 runs again.
			lines := []string{printed[slots[0]][0].succeeded, printed[slots[1]][0].failed}
			if hasPassword {
				for _, l := range lines {
					r := e.paste(l)
					refused(t, r, "once hid this DSN's password")
				}
				if r := e.run("status", "--store", dsn, "--json"); strings.Count(r.stdout, `"waiting": true`) != 2 {
					t.Fatalf("a line with the hidden password recorded something:\n%s", r.stdout)
				}
				for i, l := range lines {
					lines[i] = strings.Replace(l, ":"+store.RedactedPassword+"@", ":"+password+"@", 1)
				}
			}
			for _, l := range lines {
				if r := e.paste(l); r.code != 0 || !strings.Contains(r.stdout, "resolved task paste") {
					t.Fatalf("pasted %q: %d %s%s", l, r.code, r.stdout, r.stderr)
				}
			}
			for i, want := range []string{"succeeded", "failed"} {
				var h []struct{ Resolution *struct{ As string } }
				r := e.run("history", "--store", dsn, "--task", "paste", "--slot", slots[i], "--json")
				if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h) == 0 {
					t.Fatalf("history: %v %s", err, r.stdout)
				}
				var got string
				for _, x := range h {
					if x.Resolution != nil {
						got = x.Resolution.As
					}
				}
				if got != want {
					t.Fatalf("slot %q resolved as %q, want %q (the decision the pasted line names)", slots[i], got, want)
				}
			}
			for i, wantRan := range []bool{false, true} {
				os.Remove(marker)
				r := e.run("run", "--store", dsn, "--task", "paste", "--slot", slots[i], "--", "sh", "-c", "echo x > "+marker)
				_, err := os.Stat(marker)
				if r.code != 0 || (err == nil) != wantRan {
					t.Fatalf("slot %q after the pasted decision: exit %d, ran %v, want ran %v\n%s", slots[i], r.code, err == nil, wantRan, r.stderr)
				}
			}
		})
	}
}

// shellQuoteTest mirrors the CLI's quoting for finding a slot in a printed command.
func shellQuoteTest(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Item 6, without a slot: status prints --slot ” for a task without slots that waits for
// review, and that line, pasted, resolves it (the documented exception to item 3).
func TestPastedResolveOfTaskWithoutSlot(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "noslot.db")
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "noslot", Holder: "gone:1", RunID: "r1", TTL: time.Minute})
	if err == nil {
		_, err = s.Begin(ctx, store.Attempt{Task: "noslot", RunID: "r1", Number: 1, Holder: "gone:1", Token: l.Token})
	}
	if err == nil {
		_, err = s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Unknown})
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	e.pasteResolve(dsn, "--slot '' ")
}

// rawControl reports the first control character (other than tab and newline), DEL, C1 control
// or formatting character in s, or "".
func rawControl(s string) string {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r <= 0x9f || r == '\u202e' {
			return string(r)
		}
	}
	return ""
}

// Item 8: holders and --by with control characters are refused; text that reaches the store
// anyway (notes, checkpoints, or a holder written by an older version or a rogue writer) shows
// escaped in history, status, doctor and the 76 message; JSON keeps the exact value.
func TestHostileTextIsEscapedOnTerminals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const title, clear = "\x1b]0;pwned\x07", "\x1b[2J"
	refused(t, e.run("run", "--task", "esc", "--holder", "evil"+title, "--", "true"), "--holder")
	r := e.runIn("", []string{"ONCE_HOLDER=evil" + clear}, "run", "--task", "esc", "--", "true")
	refused(t, r, "ONCE_HOLDER")
	refused(t, e.run("resolve", "--task", "esc", "--slot", "s", "--as", "failed", "--by", "me"+title), "--by")
	for _, r := range []result{e.run("run", "--task", "esc", "--holder", "evil"+title, "--", "true")} {
		if c := rawControl(r.stderr); c != "" {
			t.Fatalf("the refusal itself printed %q raw: %q", c, r.stderr)
		}
	}

	// A note and a checkpoint with escape sequences, through once report.
	note, cp := "line1"+title+"\nline2"+clear+"\u202eevil", "cp"+clear
	r = e.runIn("", []string{"ONCE_BIN=" + bin, "N=" + note, "C=" + cp}, "run", "--task", "esc", "--slot", "s",
		"--", "sh", "-c", `"$ONCE_BIN" report --note "$N" --checkpoint "$C" && exit 3`)
	if r.code != 3 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	// A holder written straight into the store, and the attempt marked unknown.
	db := openDB(t, filepath.Join(e.home, "once.db"))
	if _, err := db.Exec(`UPDATE attempts SET holder = ?, state = 'unknown' WHERE task = 'esc'`, "host"+title+clear); err != nil {
		t.Fatal(err)
	}
	db.Close()
	outs := map[string]result{
		"run (76)": e.run("run", "--task", "esc", "--slot", "s", "--", "true"),
		"history":  e.run("history", "--task", "esc"),
		"status":   e.run("status"),
		"doctor":   e.run("doctor"),
	}
	if outs["run (76)"].code != 76 {
		t.Fatalf("run: %d %s", outs["run (76)"].code, outs["run (76)"].stderr)
	}
	for name, r := range outs {
		all := r.stdout + r.stderr
		if c := rawControl(all); c != "" {
			t.Errorf("%s printed %q raw:\n%q", name, c, all)
		}
		if !strings.Contains(all, `host\x1b]0;pwned\x07\x1b[2J`) {
			t.Errorf("%s does not show the holder escaped:\n%s", name, all)
		}
	}
	if h := outs["history"].stdout; !strings.Contains(h, `line1\x1b]0;pwned\x07 line2\x1b[2J\u202eevil`) || !strings.Contains(h, `checkpoint=cp\x1b[2J`) {
		t.Errorf("history does not show the note and checkpoint escaped:\n%s", h)
	}
	// JSON: exact values, valid JSON.
	h := e.history("esc")
	var sawNote, sawHolder bool
	for _, x := range h {
		sawNote = sawNote || x["note"] == note
		sawHolder = sawHolder || x["holder"] == "host"+title+clear
	}
	if !sawNote || !sawHolder {
		t.Errorf("history --json lost the exact values: %v", h)
	}
	if r := e.run("status", "--json"); rawControl(r.stdout) != "" || !json.Valid([]byte(r.stdout)) {
		t.Errorf("status --json: %q", r.stdout)
	}
	// A resolve note may hold anything printable or not; it is shown escaped.
	if r := e.run("resolve", "--task", "esc", "--slot", "s", "--as", "failed", "--note", "ok"+clear); r.code != 0 {
		t.Fatalf("resolve: %d %s", r.code, r.stderr)
	}
	if r := e.run("history", "--task", "esc"); rawControl(r.stdout) != "" || !strings.Contains(r.stdout, `ok\x1b[2J]`) {
		t.Errorf("history after resolve:\n%q", r.stdout)
	}
}

// Item 9: one set of limits, the same on every store: over the limit is 64 up front and
// nothing is recorded; at the limit (in ASCII and in multi-byte characters) is kept exactly.
func TestTextLimitsSameOnEveryStore(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := host(t, "limits", b.isolated())
			marker := filepath.Join(t.TempDir(), "ran")
			refused(t, e.run("run", "--task", "lim", "--holder", strings.Repeat("h", 300), "--", "touch", marker), "the limit is 255 bytes")
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("ran with a refused holder")
			}
			for _, h := range []string{strings.Repeat("h", store.MaxHolderLen), strings.Repeat("€", store.MaxHolderLen/3)} {
				if r := e.run("run", "--task", "lim", "--holder", h, "--", "true"); r.code != 0 {
					t.Fatalf("holder of %d bytes: %d %s", len(h), r.code, r.stderr)
				}
			}
			// A slot waiting for review.
			e.run("run", "--task", "lim", "--slot", "s", "--max-attempts", "1", "--", "false")
			if r := e.run("run", "--task", "lim", "--slot", "s", "--max-attempts", "1", "--", "true"); r.code != 76 {
				t.Fatalf("review: %d %s", r.code, r.stderr)
			}
			resolve := []string{"resolve", "--task", "lim", "--slot", "s", "--as", "failed"}
			refused(t, e.run(append(resolve, "--note", strings.Repeat("n", 70*1024))...), "--note is 71680 bytes long: the limit is 4096")
			refused(t, e.run(append(resolve, "--by", strings.Repeat("b", 300))...), "--by is 300 bytes long")
			if r := e.run("status", "--json"); !strings.Contains(r.stdout, `"waiting": true`) {
				t.Fatalf("a refused resolve recorded something: %s", r.stdout)
			}
			by, note := strings.Repeat("b", store.MaxByLen), strings.Repeat("ü", store.MaxNoteLen/2)
			if r := e.run(append(resolve, "--by", by, "--note", note)...); r.code != 0 {
				t.Fatalf("resolve at the limits: %d %s", r.code, r.stderr)
			}
			// once report at and over the limits, from inside a run.
			rnote, rcp := strings.Repeat("日", store.MaxNoteLen/3), strings.Repeat("😀", store.MaxCheckpointLen/4)
			r := e.runIn("", []string{"ONCE_BIN=" + bin, "N=" + rnote, "C=" + rcp, "X=" + rnote + "xx"}, "run", "--task", "lim", "--slot", "r",
				"--", "sh", "-c", `"$ONCE_BIN" report --note "$X" 2>&1 | grep -q 'is 4097 bytes long' && "$ONCE_BIN" report --note "$N" --checkpoint "$C"`)
			if r.code != 0 {
				t.Fatalf("report: %d %s", r.code, r.stderr)
			}
			var sawRes, sawReport bool
			for _, x := range e.history("lim") {
				if res, ok := x["resolution"].(map[string]any); ok && res["by"] == by && res["note"] == note {
					sawRes = true
				}
				sawReport = sawReport || x["note"] == rnote && x["checkpoint"] == rcp
			}
			if !sawRes || !sawReport {
				t.Fatalf("values at the limits did not round-trip: resolution %v, report %v", sawRes, sawReport)
			}
		})
	}
}

// Item 13: bounds on durations, a streamed backfill, messages that say the right thing, and a
// resolve conflict with a contract code.
func TestBoundsAndMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range [][]string{
		{"run", "--task", "t", "--ttl", "999999h", "--", "true"},
		{"run", "--task", "t", "--min-hold", "100000h", "--", "true"},
		{"run", "--task", "t", "--wait", "25h", "--", "true"},
		{"run", "--task", "t", "--grace", "2h", "--", "true"},
		{"run", "--task", "t", "--notify-timeout", "6m", "--", "true"},
		{"backfill", "--task", "t", "--per", "day", "--from", "2026-01-01", "--to", "2026-01-02", "--ttl", "25h", "--", "true"},
		{"doctor", "--burst", "25h"},
		{"doctor", "--max-offset", "2h"},
		{"effect", "--key", "k", "--claim-ttl", "169h", "--", "true"},
		{"keys", "forget", "--scope", "s", "--older-than", "87601h"},
	} {
		refused(t, e.run(c...), "longer than the maximum")
	}
	if r := e.run("run", "--task", "t", "--ttl", "24h", "--min-hold", "0s", "--", "true"); r.code != 0 {
		t.Fatalf("--ttl at its maximum: %d %s", r.code, r.stderr)
	}
	refused(t, e.run("run", "--task", "tâche", "--", "true"), `has 'â' at byte 1`)
	refused(t, e.run("run", "--task", "t", "--catch-up", "3d", "--", "true"), "without a slot there are no missed periods")
	refused(t, e.run("run", "--task", "t", "--slot", "x", "--catch-up", "3d", "--", "true"), "an explicit --slot has no missed periods")

	// A resolve the store refuses: 64 when the slot is not waiting, 75 while an attempt runs.
	if r := e.run("run", "--task", "c", "--slot", "done", "--", "true"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	refused(t, e.run("resolve", "--task", "c", "--slot", "done", "--as", "failed"), "attempt 1 succeeded, so the slot is not waiting for review")
	cmd, _ := startOnce(t, e, t.TempDir(), "--task", "c", "--slot", "busy")
	r := e.run("resolve", "--task", "c", "--slot", "busy", "--as", "succeeded")
	if r.code != 75 || !strings.Contains(r.stderr, "is running now") {
		t.Fatalf("resolve of a running attempt: %d %s", r.code, r.stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// Item 13: a backfill's slots are streamed: a dry run over 100 million slots (190 years of
// minutes, in the past: a slot that has not begun is refused) stays small (it
// took 2.6 GB within 20 s when the range was listed first), and a range over --max is refused
// after counting, without listing it.
func TestBackfillMemoryBounded(t *testing.T) {
	e := newEnv(t)
	args := []string{"backfill", "--task", "bf", "--per", "minute", "--from", "1800-01-01", "--to", "1990-01-01", "--max", "100000000", "--dry-run", "--", "true"}
	c := e.cmd(context.Background(), args...)
	c.Stdout, c.Stderr = io.Discard, io.Discard
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	time.Sleep(4 * time.Second)
	hwm := vmHWM(t, c.Process.Pid)
	t.Logf("backfill --dry-run over 100M slots: peak RSS %d MB after 4 s", hwm>>10)
	if hwm > 100<<10 {
		t.Fatalf("peak RSS %d MB after 4 s: the range is not streamed", hwm>>10)
	}
	refused(t, e.run("backfill", "--task", "bf", "--per", "minute", "--from", "1800-01-01", "--to", "1990-01-01", "--max", "1000000", "--", "true"),
		"holds more than 1000000 slots")
}

// vmHWM is a process's peak resident set size in kB.
func vmHWM(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmHWM %q", v)
			}
			return kb
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func openDB(t *testing.T, path string) *sql.DB {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}
