package main

// End-to-end tests of once keys and once effect with the real binary and the embedded store.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// keysEnv is an env whose PATH finds the once binary, for jobs that call once.
func keysEnv(t *testing.T) *env {
	e := newEnv(t)
	for i, v := range e.vars {
		if strings.HasPrefix(v, "PATH=") {
			e.vars[i] = "PATH=" + filepath.Dir(bin) + ":" + strings.TrimPrefix(v, "PATH=")
		}
	}
	return e
}

// runIn runs once with stdin and extra environment variables.
func (e *env) runIn(stdin string, extra []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := e.cmd(ctx, args...)
	c.Env = append(slices.Clone(e.vars), extra...)
	c.Stdin = strings.NewReader(stdin)
	return collect(e.t, c)
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func keyList(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%06d", prefix, i))
	}
	return out
}

// Test100kKeysPrintedOnceThenNever: 100,000 keys on stdin are printed once, in input order; the
// same input again prints nothing.
func Test100kKeysPrintedOnceThenNever(t *testing.T) {
	e := keysEnv(t).atVolume()
	keys := keyList("order-", 0, 100_000)
	in := strings.Join(keys, "\n") + "\n"
	r := e.runIn(in, nil, "keys", "claim", "--scope", "orders")
	if r.code != 0 {
		t.Fatalf("claim: %d %s", r.code, r.stderr)
	}
	if got := lines(r.stdout); !slices.Equal(got, keys) {
		t.Fatalf("first claim printed %d keys, want all %d in input order", len(got), len(keys))
	}
	t.Logf("100k keys claimed in %s (%.0f keys/s, whole process)", r.dur, float64(len(keys))/r.dur.Seconds())
	r = e.runIn(in, nil, "keys", "claim", "--scope", "orders")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("second claim: %d, printed %d keys, want none", r.code, len(lines(r.stdout)))
	}
}

// TestConcurrentClaimersPrintUnionOnce: two processes claim overlapping sets at once; every key
// of the union is printed by exactly one of them.
func TestConcurrentClaimersPrintUnionOnce(t *testing.T) {
	e := keysEnv(t).atVolume()
	a, b := keyList("k", 0, 30_000), keyList("k", 15_000, 45_000)
	slices.Reverse(b)
	var outs [2]string
	var wg sync.WaitGroup
	for i, set := range [][]string{a, b} {
		wg.Go(func() {
			r := e.runIn(strings.Join(set, "\n")+"\n", nil, "keys", "claim", "--scope", "race")
			if r.code != 0 {
				t.Errorf("claimer %d: %d %s", i, r.code, r.stderr)
			}
			outs[i] = r.stdout
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, o := range outs {
		for _, k := range lines(o) {
			seen[k]++
		}
	}
	if len(seen) != 45_000 {
		t.Fatalf("union printed: %d keys, want 45000", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("key %s printed %d times", k, n)
		}
	}
}

func TestBadKeysExit64WithLineNothingClaimed(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	for name, bad := range map[string]string{
		"NUL":         "a\x00b",
		"10KB":        strings.Repeat("x", 10_000),
		"invalidUTF8": "caf\xe9",
		"CR":          "a\rb",
	} {
		r := e.runIn("ok-1\nok-2\n"+bad+"\nok-3\n", nil, "keys", "claim", "--scope", "s")
		if r.code != 64 || !strings.Contains(r.stderr, "line 3") || r.stdout != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want 64 naming line 3, nothing printed", name, r.code, r.stdout, r.stderr)
		}
	}
	r := e.runIn("", nil, "keys", "claim", "--scope", "s", "ok", "bad\nkey")
	if r.code != 64 || !strings.Contains(r.stderr, "argument 2") {
		t.Fatalf("bad argument: %d %q", r.code, r.stderr)
	}
	if r := e.runIn("ok-1\nok-2\nok\n", nil, "keys", "claim", "--scope", "s"); r.stdout != "ok-1\nok-2\nok\n" {
		t.Fatalf("after the bad inputs, keys were already claimed: %q", r.stdout)
	}
	if r := e.runIn("", nil, "keys", "claim", "--scope", "s", "--pending", "x"); r.code != 64 {
		t.Fatalf("--pending outside once run: %d, want 64", r.code)
	}
}

// TestKeysWithEdgeSpaceExit64: "order-1, order-2" split on commas gives " order-2", another key
// than "order-2" byte for byte: claimed again, the order is paid twice. A key or scope that starts
// or ends with whitespace (a space, a no-break space, a BOM) is refused with 64 naming its line and
// the fix; --allow-edge-space takes it as it is, so keys already in a ledger stay readable.
func TestKeysWithEdgeSpaceExit64(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	if r := e.runIn("order-1\norder-2\n", nil, "keys", "claim", "--scope", "pay"); r.code != 0 || r.stdout != "order-1\norder-2\n" {
		t.Fatalf("first claim: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for name, in := range map[string]string{
		"leading space":  "order-3\n order-2\n",
		"trailing space": "order-3\norder-2 \n",
		"no-break space": "order-3\norder-2\u00a0\n",
		"BOM":            "order-3\n\ufefforder-2\n",
		"CRLF and space": "order-3\r\norder-2 \r\n",
	} {
		r := e.runIn(in, nil, "keys", "claim", "--scope", "pay")
		if r.code != 64 || r.stdout != "" || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, "--allow-edge-space") ||
			!strings.Contains(r.stderr, `another key than "order-2"`) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want 64 naming line 2 and the fix in one line, nothing printed", name, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"keys", "claim", "--scope", "pay", "order-2 "},
		{"keys", "status", "--scope", "pay", " order-2"},
		{"keys", "claim", "--scope", "pay ", "order-2"},
		{"effect", "--key", "order-2 ", "--", "true"},
	} {
		if r := e.runIn("", nil, args...); r.code != 64 || !strings.Contains(r.stderr, "--allow-edge-space") {
			t.Fatalf("%q: exit %d %q, want 64 and the fix", args, r.code, r.stderr)
		}
	}
	// Asked for, such a key is taken as it is: claimed, then read back.
	if r := e.runIn("order-9 \n", nil, "keys", "claim", "--allow-edge-space", "--scope", "pay"); r.code != 0 || r.stdout != "order-9 \n" {
		t.Fatalf("--allow-edge-space claim: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := e.runIn("", nil, "keys", "--allow-edge-space", "status", "--scope", "pay", "order-9 "); r.code != 0 || !strings.Contains(r.stdout, "order-9 ") {
		t.Fatalf("--allow-edge-space status: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Nothing of the refused inputs was claimed: order-3 is still new.
	if r := e.runIn("order-3\n", nil, "keys", "claim", "--scope", "pay"); r.stdout != "order-3\n" {
		t.Fatalf("order-3 was claimed by a refused input: %q", r.stdout)
	}
}

// TestPendingLeftByDeadRunIsUnknown: keys claimed --pending by a run that died are not handed out
// (76, listed on stderr) until --reclaim-unknown.
func TestPendingLeftByDeadRunIsUnknown(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	r := e.runIn("", nil, "run", "--task", "job", "--", "sh", "-c",
		`printf 'a\nb\nc\n' | once keys claim --scope job --pending >/dev/null && once keys done --scope job a && kill -9 $$`)
	if r.code != 137 {
		t.Fatalf("crashing run: %d %s", r.code, r.stderr)
	}
	r = e.runIn("", nil, "run", "--task", "job", "--", "sh", "-c", `printf 'a\nb\nc\nd\n' | once keys claim --scope job --pending`)
	if r.code != 76 || r.stdout != "d\n" || !strings.Contains(r.stderr, `"b"`) || !strings.Contains(r.stderr, "2 keys") {
		t.Fatalf("claim after the crash: %d, stdout %q, stderr %s; want d printed, b and c unknown, 76", r.code, r.stdout, r.stderr)
	}
	r = e.runIn("", nil, "keys", "status", "--scope", "job", "--json", "a", "b", "z")
	if !strings.Contains(r.stdout, `"key":"b","state":"unknown"`) || !strings.Contains(r.stdout, `"key":"a","state":"done"`) ||
		!strings.Contains(r.stdout, `"key":"z","state":"unclaimed"`) {
		t.Fatalf("status: %s", r.stdout)
	}
	r = e.runIn("", []string{"DIR=" + t.TempDir()}, "run", "--task", "job", "--", "sh", "-c",
		`printf 'b\nc\n' | once keys claim --scope job --pending --reclaim-unknown > "$DIR/todo" && cat "$DIR/todo" && once keys done --scope job < "$DIR/todo"`)
	if r.code != 0 || r.stdout != "b\nc\n" {
		t.Fatalf("--reclaim-unknown: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := e.runIn("", nil, "keys", "done", "--scope", "job", "b"); r.code != 64 {
		t.Fatalf("keys done outside a run: %d, want 64", r.code)
	}
	// d, left pending by the run that exited 76, is unknown: its work may have happened, so it is
	// forgotten (and handed out again) only with --include-done, like a done key.
	if r := e.runIn("", nil, "keys", "forget", "--scope", "job", "--older-than", "0h1ms"); r.code != 0 || !strings.Contains(r.stdout, "forgot 0 keys") {
		t.Fatalf("forget without done keys: %d %q", r.code, r.stdout)
	}
	if r := e.runIn("", nil, "keys", "forget", "--scope", "job", "--older-than", "0h1ms", "--include-done"); r.code != 0 || !strings.Contains(r.stdout, "forgot 4 keys") {
		t.Fatalf("forget with done keys: %d %q", r.code, r.stdout)
	}
}

func TestEffectCallsOncePerKey(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	call := `echo "$ONCE_EFFECT_KEY" >> ` + calls
	if r := e.runIn("", nil, "effect", "--key", "inv-1", "--", "sh", "-c", call); r.code != 0 {
		t.Fatalf("first: %d %s", r.code, r.stderr)
	}
	if r := e.runIn("", nil, "effect", "--key", "inv-1", "--", "sh", "-c", call); r.code != 0 {
		t.Fatalf("done: %d %s", r.code, r.stderr)
	}
	// A failed call (exit 3) passes its status through and releases the key.
	if r := e.runIn("", nil, "effect", "--key", "inv-2", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Fatalf("failed call: %d, want 3", r.code)
	}
	if r := e.runIn("", nil, "effect", "--key", "inv-2", "--", "sh", "-c", call); r.code != 0 {
		t.Fatalf("retry: %d %s", r.code, r.stderr)
	}
	// once dies mid-call (SIGKILL of once itself): unknown → 76 until reconciled.
	kill := `kill -9 $(ps -o ppid= -p $PPID); sleep 5`
	if r := e.runIn("", nil, "effect", "--key", "inv-3", "--claim-ttl", "1s", "--", "sh", "-c", call+"; "+kill); r.code != 137 && r.code != -1 {
		t.Fatalf("killed once: %d %s", r.code, r.stderr)
	}
	time.Sleep(1100 * time.Millisecond)
	r := e.runIn("", nil, "effect", "--key", "inv-3", "--", "sh", "-c", call)
	if r.code != 76 || !strings.Contains(r.stderr, "--reconcile") {
		t.Fatalf("after a death mid-call: %d %s; want 76 with how to decide", r.code, r.stderr)
	}
	if r := e.runIn("", nil, "effect", "--key", "inv-3", "--reconcile", "exit 7", "--", "sh", "-c", call); r.code != 76 {
		t.Fatalf("reconciler that cannot tell: %d, want 76", r.code)
	}
	if r := e.runIn("", nil, "effect", "--key", "inv-3", "--reconcile", `grep -qx "$ONCE_EFFECT_KEY" `+calls, "--", "sh", "-c", call); r.code != 0 {
		t.Fatalf("reconciled: %d %s", r.code, r.stderr)
	}
	got := lines(readFile(t, calls))
	if want := []string{"inv-1", "inv-2", "inv-3"}; !slices.Equal(got, want) {
		t.Fatalf("calls: %q, want %q", got, want)
	}
	if r := e.runIn("", nil, "effect", "--key", "inv-4", "--", "sh", "-c", "exit 0", "extra"); r.code != 0 {
		t.Fatalf("effect without --: %d", r.code)
	}
}

// A COMMAND killed by a signal mid-call (the OOM killer, kill -9, once's own forwarding of a
// Ctrl-C) may have made the call: the key is kept, not released, so a retry does not call again
// blindly (it was released, and the payment below was made twice).
func TestEffectKilledCommandIsNotCalledAgain(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	calls := filepath.Join(t.TempDir(), "calls")
	call := `echo "$ONCE_EFFECT_KEY" >> ` + calls
	start := time.Now()
	r := e.runIn("", nil, "effect", "--key", "pay-1", "--claim-ttl", "3s", "--", "sh", "-c", call+`; kill -9 $$`)
	if r.code != 137 || !strings.Contains(r.stderr, "may have happened") || !strings.Contains(r.stderr, "--reconcile") {
		t.Fatalf("killed call: %d %s; want 137 saying the key is kept", r.code, r.stderr)
	}
	claimedBy := time.Now() // the claim was made before the call, so it ends by claimedBy + 3 s
	// 75 while the claim lives; on a machine so loaded that two process starts took longer than the
	// TTL, the claim has ended and 76 is the right answer.
	if r := e.runIn("", nil, "effect", "--key", "pay-1", "--", "sh", "-c", call); r.code != 75 && (r.code != 76 || time.Since(start) < 3*time.Second) {
		t.Fatalf("retry while the claim lives: %d %s; want 75", r.code, r.stderr)
	}
	time.Sleep(time.Until(claimedBy.Add(3100 * time.Millisecond)))
	for {
		r := e.runIn("", nil, "effect", "--key", "pay-1", "--", "sh", "-c", call)
		if r.code == 76 {
			break
		}
		// 75 only until the claim's end by the store's clock (a second of slack for it).
		if r.code != 75 || time.Since(claimedBy) > 10*time.Second {
			t.Fatalf("retry after the claim ended: %d %s; want 76", r.code, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := lines(readFile(t, calls)); !slices.Equal(got, []string{"pay-1"}) {
		t.Fatalf("calls: %q, want one", got)
	}
	// An ordinary failure still releases the key: the retry calls again.
	if r := e.runIn("", nil, "effect", "--key", "pay-2", "--", "sh", "-c", "exit 137"); r.code != 137 {
		t.Fatalf("exit 137: %d", r.code)
	}
	if r := e.runIn("", nil, "effect", "--key", "pay-2", "--", "sh", "-c", call); r.code != 0 {
		t.Fatalf("retry after exit 137: %d %s", r.code, r.stderr)
	}
}

// A COMMAND that failed releases its claim so that a retry calls again; when the release itself
// fails (here another process holds the ledger's write lock past busy_timeout, as a stuck writer
// would), once effect still passes COMMAND's status through and says that the claim stays, what
// retries get meanwhile (75, then 76) and why; the retry does get 75.
func TestEffectClaimNotReleased(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "once.db")
	dsn := "sqlite://" + ledger + "?busy_timeout=300ms"
	called, locked := filepath.Join(dir, "called"), filepath.Join(dir, "locked")
	call := `touch ` + called + `; while [ ! -e ` + locked + ` ]; do sleep 0.05; done; exit 3`
	done := make(chan result, 1)
	go func() { done <- e.runIn("", nil, "effect", "--store", dsn, "--key", "inv-9", "--", "sh", "-c", call) }()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(called); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("COMMAND was not called within 60s")
		}
	}
	conn := writeLock(t, ledger) // between the call and the release
	if err := os.WriteFile(locked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`effect "inv-9" in scope "effect": COMMAND failed`, `the claim on key "inv-9" was not released`,
		"retries get 75 until this claim ends (after --claim-ttl), then 76: decide with --reconcile"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("exit %d, stderr:\n%s\nwant it to say %q", r.code, r.stderr, want)
		}
	}
	if r.code != 3 {
		t.Fatalf("exit %d, want COMMAND's 3: %s", r.code, r.stderr)
	}
	if r := e.runIn("", nil, "effect", "--store", dsn, "--key", "inv-9", "--", "sh", "-c", "exit 0"); r.code != 75 {
		t.Fatalf("retry while the claim that was not given back lives: %d %s; want 75", r.code, r.stderr)
	}
}

// TestEffectCalledButNotMarkedDone: COMMAND succeeded and the store refused the done mark (locked):
// once effect exited 69, whose message and contract say nothing was run. The call happened, so its
// status (0) stands, the line says the key is kept, and a retry does not call again.
func TestEffectCalledButNotMarkedDone(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "once.db")
	dsn := "sqlite://" + ledger + "?busy_timeout=300ms"
	called, locked, calls := filepath.Join(dir, "called"), filepath.Join(dir, "locked"), filepath.Join(dir, "calls")
	call := `echo x >> ` + calls + `; touch ` + called + `; while [ ! -e ` + locked + ` ]; do sleep 0.05; done; exit 0`
	done := make(chan result, 1)
	go func() { done <- e.runIn("", nil, "effect", "--store", dsn, "--key", "inv-10", "--", "sh", "-c", call) }()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(called); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("COMMAND was not called within 60s")
		}
	}
	conn := writeLock(t, ledger) // between the call and the done mark
	if err := os.WriteFile(locked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || strings.Contains(r.stderr, "nothing was run") || !strings.Contains(r.stderr, `COMMAND succeeded, so key "inv-10" in scope "effect" is kept`) {
		t.Fatalf("exit %d, stderr:\n%s\nwant 0 (COMMAND's) and the key kept, never 'nothing was run'", r.code, r.stderr)
	}
	if r := e.runIn("", nil, "effect", "--store", dsn, "--key", "inv-10", "--", "sh", "-c", call); r.code != 75 {
		t.Fatalf("retry while the claim lives: %d %s; want 75", r.code, r.stderr)
	}
	if got := readFile(t, calls); got != "x\n" {
		t.Fatalf("calls %q, want one", got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// storeFlowJob is the seed's sync as a shell job: 3,000 flows in chunks of 250; each chunk is
// claimed --pending, written to orders (the business table), then marked done. CRASH_AT=<point>
// kills the job (SIGKILL) at that point of chunk 8 (two thirds in). Unknown keys (left by a dead
// run) are not written; the job reports them and exits 76 after the other chunks.
const storeFlowJob = `
set -u
status=0
for i in $(seq 0 11); do
  sed -n "$((i*250+1)),$((i*250+250))p" "$DIR/flows" > "$DIR/chunk.$$"
  [ "$i" = 8 ] && [ "${CRASH_AT:-}" = before-claim ] && kill -9 $$
  once keys claim --scope orders --pending ${RECLAIM:-} < "$DIR/chunk.$$" > "$DIR/todo.$$" || status=$?
  [ "$i" = 8 ] && [ "${CRASH_AT:-}" = between-claim-and-write ] && kill -9 $$
  cat "$DIR/todo.$$" >> "$DIR/orders"
  [ "$i" = 8 ] && [ "${CRASH_AT:-}" = after-write ] && kill -9 $$
  once keys done --scope orders < "$DIR/todo.$$" || exit 1
  [ "$i" = 8 ] && [ "${CRASH_AT:-}" = after-commit ] && kill -9 $$
done
exit $status
`

// TestStoreFlowShellNoDuplicates: the store-flow story, variant (b): killed at two thirds, launched
// twice at once ("cron" and "catch-up"), reviewed by a person, re-run: exactly 3,000 orders, each once.
func TestStoreFlowShellNoDuplicates(t *testing.T) {
	for _, crash := range []string{"before-claim", "between-claim-and-write", "after-write", "after-commit"} {
		t.Run(crash, func(t *testing.T) {
			t.Parallel()
			e := keysEnv(t).atVolume()
			dir := t.TempDir()
			flows := keyList("flow-", 0, 3000)
			if err := os.WriteFile(filepath.Join(dir, "flows"), []byte(strings.Join(flows, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			job := []string{"run", "--task", "store-flow", "--", "sh", "-c", storeFlowJob}
			vars := []string{"DIR=" + dir}
			if r := e.runIn("", append(vars, "CRASH_AT="+crash), job...); r.code != 137 {
				t.Fatalf("crashing run: %d %s", r.code, r.stderr)
			}
			if n := countLines(t, filepath.Join(dir, "orders")); n < 2000 || n > 2250 {
				t.Fatalf("%d orders after the crash, want 2000–2250", n)
			}
			// cron and catch-up launch it at the same moment: one runs, the other is busy (75) or
			// runs after it and finds nothing left.
			var wg sync.WaitGroup
			codes := make([]int, 2)
			for i := range codes {
				wg.Go(func() { codes[i] = e.runIn("", vars, job...).code })
			}
			wg.Wait()
			wantUnknown := crash == "between-claim-and-write" || crash == "after-write"
			for _, c := range codes {
				if c != 0 && c != 75 && !(wantUnknown && c == 76) {
					t.Fatalf("concurrent launches exited %v", codes)
				}
			}
			if wantUnknown != slices.Contains(codes, 76) {
				t.Fatalf("concurrent launches exited %v; unknown keys expected: %v", codes, wantUnknown)
			}
			// The person's review: unknown keys whose order exists are marked done; the rest are
			// handed out again by the final re-run.
			r := e.runIn(strings.Join(flows, "\n"), nil, "keys", "status", "--scope", "orders", "--json")
			orders := readFile(t, filepath.Join(dir, "orders"))
			written := map[string]bool{}
			for _, o := range lines(orders) {
				written[o] = true
			}
			var happened []string
			for _, l := range lines(r.stdout) {
				if strings.Contains(l, `"state":"unknown"`) {
					k := strings.Split(strings.Split(l, `"key":"`)[1], `"`)[0]
					if written[k] {
						happened = append(happened, k)
					}
				}
			}
			if len(happened) > 0 {
				if r := e.runIn(strings.Join(happened, "\n"), nil, "keys", "claim", "--scope", "orders", "--reclaim-unknown"); r.code != 0 {
					t.Fatalf("marking reviewed keys done: %d %s", r.code, r.stderr)
				}
			}
			if r := e.runIn("", append(vars, "RECLAIM=--reclaim-unknown"), job...); r.code != 0 {
				t.Fatalf("re-run after review: %d %s", r.code, r.stderr)
			}
			got := lines(readFile(t, filepath.Join(dir, "orders")))
			seen := map[string]bool{}
			for _, o := range got {
				if seen[o] {
					t.Fatalf("duplicate order %s", o)
				}
				seen[o] = true
			}
			if len(seen) != 3000 {
				t.Fatalf("%d orders, want 3000", len(seen))
			}
		})
	}
}

// TestKeysStatusAndForgetFailWhenStdoutCannotBeWritten: keys status --json > file on a full disk
// exited 0 with nothing written (the buffered output's error was dropped), and forget's count too;
// keys claim and history exited 70. A script that parses the output must learn it did not get it.
func TestKeysStatusAndForgetFailWhenStdoutCannotBeWritten(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	e := keysEnv(t)
	if r := e.run("keys", "claim", "--scope", "s", "a1"); r.code != 0 {
		t.Fatalf("claim: %d %s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"keys", "status", "--scope", "s", "--json", "a1"},
		{"keys", "status", "--scope", "s", "a1"},
		{"keys", "forget", "--scope", "s", "--older-than", "1h"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		c := e.cmd(ctx, args...)
		var se strings.Builder
		c.Stdout, c.Stderr = full, &se
		err := c.Run()
		cancel()
		if c.ProcessState == nil || c.ProcessState.ExitCode() != 70 || !strings.Contains(se.String(), "no space left on device") {
			t.Errorf("once %s > /dev/full: %v, stderr %q; want 70 naming the write error", strings.Join(args, " "), err, se.String())
		}
	}
}

// SIGQUIT to once effect is passed on as SIGTERM, SIGINT and SIGHUP are: COMMAND is stopped by it,
// once exits 131 and keeps the key (the call may have happened). Left to Go, SIGQUIT dumped the
// goroutines and exited 2.
func TestEffectSIGQUITIsPassedOn(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	started := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.cmd(ctx, "effect", "--key", "q-1", "--", "sh", "-c", "echo up > "+started+"; exec sleep 30")
	var errOut strings.Builder
	c.Stderr = &errOut
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); countLines(t, started) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("COMMAND did not start")
		}
	}
	_ = c.Process.Signal(syscall.SIGQUIT)
	err := c.Wait()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 131 || strings.Contains(errOut.String(), "goroutine ") || !strings.Contains(errOut.String(), "may have happened") {
		t.Fatalf("exit %d, stderr %q: want 131 saying the key is kept", code, errOut.String())
	}
}
