package main

// once serve's dashboard driven end to end in a real headless Chromium (chromedp): a SQLite store
// seeded through the real binary, the real once serve, and a browser that reads, logs in and
// resolves as a person would. With ONCE_SCREENSHOTS=1 it writes the PNGs of docs/screenshots/.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// chromiumPath is Debian's chromium (scripts/testenv/chromium.sh installs it), or ONCE_TEST_CHROMIUM.
// Without it the test is skipped, or fails when ONCE_TEST_REQUIRE asks for every tool ("all") or
// names chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("ONCE_TEST_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	msg := "chromium is not installed (apt-get install chromium, or ./scripts/test installs it through scripts/testenv/chromium.sh; ONCE_TEST_CHROMIUM names another binary)"
	if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "chromium") {
		t.Fatalf("%s, but ONCE_TEST_REQUIRE=%s requires it", msg, r)
	}
	t.Skip(msg)
	return ""
}

// dashEnv is the machine of the dashboard test: a private ONCE_HOME (0700) and an explicit
// ONCE_STORE for every process it starts.
func dashEnv(t *testing.T) (*env, string) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	dsn := "sqlite://" + filepath.Join(home, "dashboard.db")
	return &env{t: t, home: home, bin: bin, vars: []string{"ONCE_HOME=" + home, "ONCE_STORE=" + dsn,
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), noExitSleep}}, dsn
}

// phase logs how long each step of the test took.
type phase struct {
	t    *testing.T
	last time.Time
}

func (p *phase) done(what string) {
	p.t.Helper()
	now := time.Now()
	p.t.Logf("%-52s %6.2fs", what, now.Sub(p.last).Seconds())
	p.last = now
}

func TestServeDashboardInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	began := time.Now()
	ph := &phase{t: t, last: began}
	e, dsn := dashEnv(t)
	// The seed runs the binary built without -race (the same once, faster to start: a race-built
	// launch costs about 2 s on a loaded machine); once serve, the code under test here, and the
	// commands that check the ledger run the race-built one when the tests are.
	seed := &env{t: t, home: e.home, vars: e.vars, bin: volumeBin}
	seedStart := time.Now().UTC()

	// Tasks that succeeded, one that failed.
	for i := 0; i < 3; i++ {
		if r := seed.run("run", "--task", "sync-orders", "--holder", "web-1", "--", "sh", "-c", fmt.Sprintf("sleep 0.%d", i+1)); r.code != 0 {
			t.Fatalf("sync-orders: %d %s", r.code, r.stderr)
		}
	}
	if r := seed.run("run", "--task", "backup-db", "--holder", "web-2", "--slot", "2026-05-01", "--", "true"); r.code != 0 {
		t.Fatalf("backup-db: %d %s", r.code, r.stderr)
	}
	if r := seed.run("run", "--task", "send-invoices", "--holder", "web-1", "--slot", "2026-05-01", "--", "sh", "-c", "echo 'smtp: connection refused' >&2; exit 3"); r.code != 3 {
		t.Fatalf("send-invoices: %d, want 3: %s", r.code, r.stderr)
	}
	ph.done("seed: runs that succeeded and failed")

	// Business keys: orders claimed done; payments claimed two-phase by a run, one completed and
	// two left pending when the run ended: their outcome is unknown.
	if r := seed.run("keys", "claim", "--scope", "orders", "o-1001", "o-1002", "o-1003"); r.code != 0 {
		t.Fatalf("keys claim: %d %s", r.code, r.stderr)
	}
	pay := fmt.Sprintf(`%[1]s keys claim --scope payments --pending pay-7001 pay-7002 pay-7003 >/dev/null && %[1]s keys done --scope payments pay-7003`, volumeBin)
	if r := seed.run("run", "--task", "charge-cards", "--holder", "web-1", "--slot", "2026-05-01", "--", "sh", "-c", pay); r.code != 0 {
		t.Fatalf("charge-cards: %d %s", r.code, r.stderr)
	}
	ph.done("seed: keys, two of them unknown")

	// A slot waiting for review: kill -9 of once leaves its attempt running; after the lease's TTL
	// the next run marks it unknown and, with the default --on-unknown review, records a review.
	// export-ledger's holder is killed the same way, and its task does not run again: its attempt
	// stays running with its lease gone, what the overview shows as holder gone.
	gone, _ := startOnce(t, seed, t.TempDir(), "--task", "export-ledger", "--slot", "2026-05-01", "--holder", "web-4", "--ttl", "1s")
	c, _ := startOnce(t, seed, t.TempDir(), "--task", "rebuild-index", "--slot", "2026-05-01", "--holder", "web-3", "--ttl", "1s")
	for _, k := range []*exec.Cmd{gone, c} {
		if err := k.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	gone.Wait()
	c.Wait()
	time.Sleep(time.Until(killed.Add(1200 * time.Millisecond)))
	if r := seed.run("run", "--task", "rebuild-index", "--slot", "2026-05-01", "--holder", "web-1", "--", "true"); r.code != 76 {
		t.Fatalf("rebuild-index after kill -9: %d, want 76 (review)\n%s", r.code, r.stderr)
	}
	ph.done("seed: kill -9, then a review")

	seedOverlap(t, seed, dsn)
	ph.done("seed: overlap (SIGSTOP, a takeover without Abandon)")

	// The daemon's jobs, for the jobs page and the overview's next runs.
	jobs := writeJobs(t, t.TempDir(), "jobs.toml", `[defaults]
tz = "UTC"

[[job]]
name = "sync-orders"
schedule = "0 2 * * *"
command = ["/usr/local/bin/sync-orders"]
catch-up = "1d"

[[job]]
name = "send-invoices"
schedule = "30 6 * * 1-5"
command = "send-invoices --all"

[[job]]
name = "backup-db"
schedule = "@every 6h"
command = ["/usr/local/bin/backup", "--full"]
`)

	token := "dashboard-test-token-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	tokenFile := filepath.Join(e.home, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, e, "--listen", "127.0.0.1:0", "--token-file", tokenFile, "--jobs", jobs)
	ph.done("once serve: up (/healthz)")
	// /metrics of the same server: the seeded tasks, the store up, and no password or DSN in it.
	if resp, err := http.Get(base + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(body)
		if resp.StatusCode != 200 || !strings.Contains(m, "once_store_up 1") || !strings.Contains(m, `once_task_last_success_timestamp_seconds{task="`) {
			t.Fatalf("/metrics: %d\n%.2000s", resp.StatusCode, m)
		}
		if strings.Contains(m, "sqlite://") || strings.Contains(m, token) {
			t.Fatal("/metrics shows the DSN or the token")
		}
	}

	// A job reporting its progress while the browser watches /leases.
	prog := seed.cmd(context.Background(), "run", "--task", "reindex-search", "--holder", "web-2", "--slot", "2026-05-01", "--", "sh", "-c",
		fmt.Sprintf(`i=1; while [ $i -le 60 ]; do %s report --progress $i/60 --records $((i * 250)); i=$((i + 1)); sleep 0.5; done`, volumeBin))
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	progDone := make(chan struct{})
	go func() { prog.Wait(); close(progDone) }()
	t.Cleanup(func() { prog.Process.Kill(); <-progDone })

	shots := t.TempDir()
	if os.Getenv("ONCE_SCREENSHOTS") == "1" {
		shots = filepath.Join("..", "..", "docs", "screenshots")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, chrome, shots)
	ph.done("chromium: started")
	b.waitJS(`document.readyState === "complete"`, 5*time.Second) // the first tab
	waitLease(t, dsn, "reindex-search", 10*time.Second)

	// Login page (before logging in): a reader sees the dashboard without the token on loopback.
	b.open(base + "/login")
	b.shot("login")

	// a. The overview lists every task with its status label.
	b.open(base + "/")
	want := map[string]string{
		"sync-orders":    "succeeded",
		"backup-db":      "succeeded",
		"send-invoices":  "failed",
		"rebuild-index":  "waiting for review",
		"import-flows":   "waiting for review",
		"reindex-search": "running",
		"export-ledger":  "holder gone",
	}
	for task, label := range want {
		got := b.text(fmt.Sprintf(`tr[data-task=%q] .status`, task))
		if got != label {
			t.Errorf("overview: task %s shows status %q, want %q", task, got, label)
		}
	}
	if got := b.text(`tr[data-task="reindex-search"] .holder`); got != "web-2" {
		t.Errorf("overview: the running task's holder is %q, want web-2", got)
	}
	// The holder-gone section says what to paste; pasted in a shell, the command settles the slot.
	failed := b.text(`#gone .gone-attempt[data-task="export-ledger"] pre.resolve-failed`)
	if want := "once resolve --task export-ledger --slot 2026-05-01 --as failed --store " + dsn; failed != want {
		t.Errorf("overview: export-ledger's resolve command reads %q, want %q", failed, want)
	}
	b.shot("overview")
	checkGoneDrawn(t, b, base, url.Values{"from": {seedStart.Add(-5 * time.Second).Truncate(time.Second).Format(time.RFC3339)},
		"to": {time.Now().UTC().Add(10 * time.Second).Truncate(time.Second).Format(time.RFC3339)}}.Encode())
	pasted := exec.Command("sh", "-c", failed+" --note 'web-4 was killed; run it again'")
	pasted.Env = append(slices.Clip(e.vars), "PATH="+filepath.Dir(e.bin)+":"+os.Getenv("PATH"))
	if out, err := pasted.CombinedOutput(); err != nil {
		t.Fatalf("the pasted %s: %v\n%s", failed, err, out)
	}
	b.open(base + "/")
	if got := b.text(`tr[data-task="export-ledger"] .status`); got != "failed" {
		t.Errorf("overview after the pasted resolve: export-ledger shows %q, want failed", got)
	}
	if n := evalJS[int](b, `document.querySelectorAll("#gone").length`); n != 0 {
		t.Errorf("overview after the pasted resolve: the holder-gone section is still there")
	}
	// Times in the reader's zone (the browser runs in UTC) name it, and the switch marks it.
	b.open(base + "/?tz=local")
	if got := b.text(`tr[data-task="export-ledger"] time`); !strings.HasSuffix(got, "UTC") || strings.Contains(got, "Z") {
		t.Errorf("overview with tz=local: a time reads %q, want it in the browser's own form, naming its zone", got)
	}
	if got := b.text(`.switch a[aria-current]`); got != "local" {
		t.Errorf("overview with tz=local: the switch marks %q, want local", got)
	}
	b.open(base + "/?tz=utc")
	ph.done("a. overview, holder gone, the pasted resolve")

	// b. The timeline of the seed's range draws the two overlapping attempts red and names both
	// holders.
	from, to := seedStart.Add(-5*time.Second).Truncate(time.Second), time.Now().UTC().Add(10*time.Second).Truncate(time.Second)
	b.open(base + "/timeline?" + url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}.Encode())
	red := evalJS[[]map[string]string](b, `Array.from(document.querySelectorAll("svg.timeline rect.overlap")).map(r => ({
		task: r.closest("g.row").dataset.task, holder: r.dataset.holder, fill: getComputedStyle(r).fill,
		y: String(r.getBBox().y), h: String(r.getBBox().height)}))`)
	if len(red) != 2 {
		t.Errorf("timeline: %d rect.overlap, want 2 (hostA's and hostB's attempts): %v", len(red), red)
	}
	holders := []string{}
	for _, r := range red {
		holders = append(holders, r["holder"])
		if r["task"] != "import-flows" || r["fill"] != "rgb(255, 0, 0)" {
			t.Errorf("timeline: overlap bar %v, want task import-flows drawn rgb(255, 0, 0)", r)
		}
	}
	if slices.Sort(holders); !slices.Equal(holders, []string{"hostA", "hostB"}) {
		t.Errorf("timeline: the red bars' holders are %v, want hostA and hostB", holders)
	}
	// Both visible: one above the other in the row, not one drawn over the other.
	if len(red) == 2 && (red[0]["y"] == red[1]["y"] || red[0]["h"] != "9" || red[1]["h"] != "9") {
		t.Errorf("timeline: the overlapping bars are not drawn one above the other, each half the row: %v", red)
	}
	if n := evalJS[int](b, `document.querySelectorAll("svg.timeline rect.bar").length`); n < 10 {
		t.Errorf("timeline: %d bars, want every seeded attempt (10 or more)", n)
	}
	items := evalJS[[]string](b, `Array.from(document.querySelectorAll("ul.overlaps li")).map(li => li.textContent)`)
	if len(items) != 1 || !strings.Contains(items[0], "import-flows") || !strings.Contains(items[0], "hostA") || !strings.Contains(items[0], "hostB") {
		t.Errorf("timeline: the overlap list is %q, want one item naming import-flows, hostA and hostB", items)
	}
	if h := b.text("main h2"); !strings.HasPrefix(h, "Overlapping attempts (1)") {
		t.Errorf("timeline: heading %q, want Overlapping attempts (1)", h)
	}
	b.shot("timeline")
	ph.done("b. timeline")

	// c. The review queue: without a session it offers a login, not the form; after logging in
	// with the token, resolving as failed changes the ledger and the slot page shows the audit.
	b.open(base + "/review")
	if n := evalJS[int](b, `document.querySelectorAll("form.resolve").length`); n != 0 {
		t.Errorf("review: %d resolve forms before logging in, want 0", n)
	}
	b.open(base + "/login?next=/review")
	b.do(chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token))
	b.do(chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)))
	// Loaded to the end: a page still arriving shows its first sections only.
	b.waitJS(`location.pathname === "/review" && document.readyState === "complete" && document.querySelector("form.resolve") !== null`, 10*time.Second)
	if got := evalJS[[]string](b, `Array.from(document.querySelectorAll("section.review")).map(s => s.dataset.task + "/" + s.dataset.slot)`); !slices.Equal(got, []string{"rebuild-index/2026-05-01", "import-flows/batch-1"}) &&
		!slices.Equal(got, []string{"import-flows/batch-1", "rebuild-index/2026-05-01"}) {
		t.Errorf("review: the queue is %v, want rebuild-index/2026-05-01 and import-flows/batch-1", got)
	}
	sec := `section.review[data-task="rebuild-index"] `
	note, by := "web-3 was killed mid-rebuild; the index is partial, run it again", "ops-alice"
	b.do(chromedp.SendKeys(chromedp.CSS(sec+`textarea[name="note"]`), note))
	b.do(chromedp.SendKeys(chromedp.CSS(sec+`input[name="by"]`), by))
	b.shot("review")
	b.do(chromedp.Click(chromedp.CSS(sec + `button[value="failed"]`)))
	b.waitJS(`document.querySelector("p.flash") !== null && document.readyState === "complete"`, 10*time.Second)
	if f := b.text("p.flash"); !strings.Contains(f, "rebuild-index") || !strings.Contains(f, "failed") {
		t.Errorf("review: after resolving, the flash says %q", f)
	}
	var res *store.Resolution
	for _, x := range e.history("rebuild-index") {
		if r, ok := x["resolution"].(map[string]any); ok {
			res = &store.Resolution{As: store.State(fmt.Sprint(r["as"])), By: fmt.Sprint(r["by"]), Note: fmt.Sprint(r["note"])}
		}
	}
	if res == nil || res.As != store.Failed || res.By != by+" via once serve" || res.Note != note {
		t.Errorf("history after resolving in the browser: resolution %+v, want failed by %q with the note", res, by+" via once serve")
	}
	st := e.status()
	for _, r := range st.Review {
		if r.Task == "rebuild-index" {
			t.Errorf("once status still lists rebuild-index as waiting for review: %+v", st.Review)
		}
	}
	if len(st.Review) != 1 || st.Review[0].Task != "import-flows" {
		t.Errorf("once status: review %+v, want only import-flows", st.Review)
	}
	b.open(base + "/slot?task=rebuild-index&slot=2026-05-01")
	if r := b.text("dd.resolution"); !strings.Contains(r, "failed") || !strings.Contains(r, by+" via once serve") || !strings.Contains(r, note) {
		t.Errorf("slot page: the resolution reads %q, want failed, %q and the note", r, by)
	}
	b.shot("slot")
	ph.done("c. login, resolve as failed, audit")

	// d. /leases: the progress bar moves without a reload.
	b.open(base + "/leases")
	evalJS[bool](b, `window.onceNoReload = true`)
	sel := `#leases tr[data-task="reindex-search"] progress`
	b.waitJS(fmt.Sprintf(`document.querySelector(%q) !== null`, sel), 5*time.Second)
	read := func() float64 { return evalJS[float64](b, fmt.Sprintf(`document.querySelector(%q).value`, sel)) }
	v1, t1 := read(), time.Now()
	time.Sleep(2 * time.Second)
	v2 := read()
	for deadline := time.Now().Add(10 * time.Second); v2 <= v1 && time.Now().Before(deadline); v2 = read() {
		time.Sleep(250 * time.Millisecond) // a loaded machine: the job's reports come slower
	}
	if v2 <= v1 {
		t.Errorf("leases: the progress bar read %v, then still %v %s later: it did not move", v1, v2, time.Since(t1).Round(time.Second))
	}
	if !evalJS[bool](b, `window.onceNoReload === true`) {
		t.Error("leases: the page was reloaded (the live update should not reload it)")
	}
	if h := b.text(`#leases tr[data-task="reindex-search"] td:nth-child(3)`); h != "web-2" {
		t.Errorf("leases: holder %q, want web-2", h)
	}
	t.Logf("leases: progress %v/60, then %v/60 %s later", v1, v2, time.Since(t1).Round(100*time.Millisecond))
	b.shot("leases")
	ph.done("d. leases, live progress")

	// The jobs page (--jobs), logged in: pause and run-now buttons.
	b.open(base + "/jobs")
	if n := evalJS[int](b, `document.querySelectorAll("tr[data-job]").length`); n != 3 {
		t.Errorf("jobs: %d rows, want 3", n)
	}
	if n := evalJS[int](b, `document.querySelectorAll("tr[data-job] button[value=pause]").length`); n != 3 {
		t.Errorf("jobs: %d pause buttons for a logged-in reader, want 3", n)
	}
	b.shot("jobs")

	// f. /keys: the scopes with their counts; the unknown effects of one.
	b.open(base + "/keys")
	if got := b.text(`tr[data-scope="payments"] .status`); got != "2" {
		t.Errorf("keys: payments shows %q unknown, want 2", got)
	}
	if got := b.text(`tr[data-scope="orders"] td:nth-child(4)`); got != "3" {
		t.Errorf("keys: orders shows %q done, want 3", got)
	}
	b.shot("keys")
	b.do(chromedp.Click(chromedp.CSS(`tr[data-scope="payments"] a[href*="state=unknown"]`)))
	// The URL changes when the navigation commits, before the new page is parsed: wait for its hint.
	b.waitJS(`location.search.includes("state=unknown") && document.readyState === "complete" && document.querySelector("p.hint code") !== null`, 10*time.Second)
	if got := evalJS[[]string](b, `Array.from(document.querySelectorAll("table.keys tr[data-key]")).map(r => r.dataset.key + "=" + r.querySelector(".status").textContent)`); !slices.Equal(got, []string{"pay-7001=unknown", "pay-7002=unknown"}) {
		t.Errorf("keys: the unknown effects of payments are %v, want pay-7001 and pay-7002", got)
	}
	if h := b.text("p.hint code"); h != "once keys claim --scope payments --reclaim-unknown KEY" {
		t.Errorf("keys: the hint reads %q", h)
	}
	b.shot("keys-unknown")
	ph.done("f. keys, unknown effects")

	// e. 简体中文.
	b.open(base + "/?lang=zh-CN")
	if h := b.text("main h1"); h != "总览" {
		t.Errorf("zh-CN: heading %q, want 总览", h)
	}
	nav := b.text("header nav")
	for _, w := range []string{"总览", "时间线", "待审核", "租约", "定时任务"} {
		if !strings.Contains(nav, w) {
			t.Errorf("zh-CN: the nav %q lacks %s", nav, w)
		}
	}
	// rebuild-index was resolved as failed above: its unknown attempt now reads as failed.
	for task, label := range map[string]string{"sync-orders": "成功", "send-invoices": "失败", "rebuild-index": "失败", "import-flows": "等待审核", "reindex-search": "运行中"} {
		if got := b.text(fmt.Sprintf(`tr[data-task=%q] .status`, task)); got != label {
			t.Errorf("zh-CN: task %s shows %q, want %q", task, got, label)
		}
	}
	if th := b.text("table.tasks thead"); !strings.Contains(th, "任务") || !strings.Contains(th, "状态") {
		t.Errorf("zh-CN: the table's head %q lacks 任务 and 状态", th)
	}
	b.shot("overview-zh-CN")
	ph.done("e. zh-CN, jobs")

	// g. Log out (taken from this origin only: Chromium's form says same-origin, and with
	// Referrer-Policy no-referrer its Origin is null): the review page offers no form any more.
	b.open(base + "/review?lang=en")
	b.do(chromedp.Click(chromedp.CSS(`header .session form button`)))
	b.waitJS(`location.pathname === "/" && document.readyState === "complete" && document.querySelector('header .session a[href^="/login"]') !== null`, 10*time.Second)
	b.open(base + "/review")
	if n := evalJS[int](b, `document.querySelectorAll("form.resolve").length`); n != 0 {
		t.Errorf("after log out: %d resolve forms, want none", n)
	}
	ph.done("g. log out")

	_ = prog.Process.Signal(syscall.SIGTERM)
	select {
	case <-progDone:
	case <-time.After(15 * time.Second):
		t.Error("the reporting job did not stop within 15 s of SIGTERM")
	}
	t.Logf("total %.1fs; screenshots in %s", time.Since(began).Seconds(), shots)
}

// seedOverlap makes the ledger hold two attempts of task import-flows by two holders at the same
// time, the way a takeover without the guard would leave it:
//
//  1. hostA's real once run (slot batch-1, --ttl 1500ms) is frozen with SIGSTOP, outside a ledger
//     write (once only), so its lease expires — and its command is killed before that by the
//     supervision shim's fence (the lease's stop-by instant, which the frozen once can no longer
//     move): checked here;
//  2. hostB takes the expired lease through the library and records its attempt (slot batch-2)
//     without Abandon, the step once's guard takes before it begins: hostA's attempt stays
//     running in the ledger, as an unguarded second scheduler would leave it;
//  3. hostA is woken: its renewal and its outcome are refused (a later token was issued);
//  4. hostC's real once run takes the lease and marks hostA's attempt unknown, its end at that
//     moment: the ledger has hostA's attempt spanning hostB's.
//
// A real takeover (once run, once daemon) abandons the stale attempt as it takes the lease, so the
// ledger would show hostA ending where hostB starts: no overlap. See the report in docs/dashboard.md.
func seedOverlap(t *testing.T, e *env, dsn string) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const task = "import-flows"
	dir := t.TempDir()
	a, cmdPid := startOnce(t, e, dir, "--task", task, "--slot", "batch-1", "--holder", "hostA", "--ttl", "1500ms", "--grace", "1s")
	freezeOutsideWrite(t, a.Process.Pid, strings.TrimPrefix(dsn, "sqlite://"))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			syscall.Kill(a.Process.Pid, syscall.SIGCONT)
		}
	})
	cmdDied := false
	for deadline := time.Now().Add(5 * time.Second); lease(t, s, task) != nil; {
		if time.Now().After(deadline) {
			t.Fatal("hostA's lease did not expire within 5 s of SIGSTOP")
		}
		cmdDied = cmdDied || !alive(cmdPid)
		time.Sleep(20 * time.Millisecond)
	}
	// The shim killed the command by the lease's stop-by instant, before the store could give the
	// lease to anyone else, although its once was frozen.
	if !cmdDied && alive(cmdPid) {
		t.Fatalf("hostA's command %d outlived its lease while its once was frozen: the shim's fence did not kill it", cmdPid)
	}
	if !cmdDied {
		t.Logf("hostA's command died as its lease expired (the poll saw both at once)")
	}

	// hostB: the expired lease taken and an attempt recorded, without Abandon.
	runID := uuid.Must(uuid.NewV7()).String()
	lb, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "hostB", RunID: runID, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("hostB's acquire of the expired lease: %v", err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: "batch-2", RunID: runID, Number: 1, Holder: "hostB", Token: lb.Token, State: store.Running}); err != nil {
		t.Fatalf("hostB's begin: %v", err)
	}
	time.Sleep(1200 * time.Millisecond)
	recs := int64(3000)
	if err := s.Report(ctx, runID, lb.Token, store.Report{Records: &recs, Progress: "3000/3000"}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := s.Finish(ctx, runID, lb.Token, store.Outcome{State: store.Succeeded, ExitCode: &zero}); err != nil {
		t.Fatalf("hostB's finish: %v", err)
	}
	if err := s.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}

	// hostA wakes: a later token was issued, so nothing it writes is taken, and it stops its command.
	if err := syscall.Kill(a.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	exited := make(chan error, 1)
	go func() { exited <- a.Wait() }()
	select {
	case err := <-exited:
		t.Logf("hostA's once woke without its lease and exited: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("hostA's once did not exit within 15 s of waking")
	}
	if !waitDead(cmdPid, 2*time.Second) {
		t.Errorf("hostA's command %d is alive after its once woke without its lease and exited", cmdPid)
	}

	if st, err := s.Slot(ctx, task, "batch-1"); err != nil || st.Last == nil || st.Last.State != store.Running {
		t.Fatalf("hostA's attempt after its once woke and exited: %+v %v; want still running (its outcome refused)", st.Last, err)
	}

	// hostC's real run marks hostA's attempt unknown now.
	r := e.run("run", "--task", task, "--slot", "batch-3", "--holder", "hostC", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "vanished") {
		t.Fatalf("hostC: %d, want 0 and the abandoned attempt logged\n%s", r.code, r.stderr)
	}
	var aEnd, bStart, bEnd time.Time
	for _, x := range e.history(task) {
		at := func(k string) time.Time { v, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(x[k])); return v }
		switch x["holder"] {
		case "hostA":
			if x["state"] != "unknown" {
				t.Errorf("hostA's attempt is %v, want unknown", x["state"])
			}
			aEnd = at("ended_at")
		case "hostB":
			bStart, bEnd = at("started_at"), at("ended_at")
		}
	}
	if !bStart.Before(aEnd) || !bEnd.Before(aEnd) {
		t.Fatalf("the ledger holds no overlap: hostA ended %s, hostB ran %s → %s", aEnd, bStart, bEnd)
	}
}

// freezeOutsideWrite stops process pid (SIGSTOP) at a moment it is not inside a write of the
// SQLite ledger at path: a holder frozen inside a write transaction would hold every other writer
// (docs/reliability.md, Findings). Every write holds the ledger's writers' queue (an flock) from
// before BEGIN to after COMMIT, so the process is stopped, the queue tried without waiting, and
// the process woken and stopped again a moment later while it is taken.
func freezeOutsideWrite(t *testing.T, pid int, path string) {
	t.Helper()
	q, err := os.OpenFile(sqlite.QueuePath(path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for try := 0; try < 50; try++ {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); procState(pid) != "T"; {
			if time.Now().After(deadline) {
				t.Fatalf("process %d not stopped within 5 s of SIGSTOP (state %q)", pid, procState(pid))
			}
			time.Sleep(time.Millisecond)
		}
		err := syscall.Flock(int(q.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			syscall.Flock(int(q.Fd()), syscall.LOCK_UN)
			if try > 0 {
				t.Logf("process %d stopped outside a ledger write at try %d", pid, try+1)
			}
			return
		}
		if err != syscall.EWOULDBLOCK {
			t.Fatal(err)
		}
		syscall.Kill(pid, syscall.SIGCONT)
		time.Sleep(37 * time.Millisecond)
	}
	t.Fatalf("process %d was inside a ledger write at each of 50 tries", pid)
}

// procState is the state letter of /proc/PID/stat ("T" stopped), "" when it cannot be read.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The name, field 2, is in parentheses and may hold spaces: the state follows the last ")".
	_, rest, ok := strings.Cut(string(b[strings.LastIndexByte(string(b), ')')+1:]), " ")
	if !ok || rest == "" {
		return ""
	}
	return rest[:1]
}

// lease is task's lease held now, nil when none.
func lease(t *testing.T, s store.Store, task string) *store.Lease {
	t.Helper()
	ls, err := s.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Task == task {
			return &l
		}
	}
	return nil
}

// waitLease waits until task's lease is held (a run has started).
func waitLease(t *testing.T, dsn, task string, within time.Duration) {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for deadline := time.Now().Add(within); lease(t, s, task) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not take its lease within %s", task, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startServe starts once serve with args and returns its base URL, read from its "serving" log
// line (so --listen 127.0.0.1:0 works: no port is picked and lost to another process), once
// /healthz answers. Its log is shown when the test fails.
func startServe(t *testing.T, e *env, args ...string) string {
	t.Helper()
	_, base := serveProc(t, e, args...)
	return base
}

// serveProc is startServe that also gives the process.
func serveProc(t *testing.T, e *env, args ...string) (*daemon, string) {
	t.Helper()
	d := &daemon{t: t, name: "serve", done: make(chan struct{})}
	// A page over a seeded ledger under -race on a loaded machine takes seconds: not a store that
	// hangs (the default deadline's 503).
	d.cmd = e.cmd(context.Background(), append([]string{"serve", "--log-format", "json", "--store-timeout", "2m"}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(d.done)
		if ee, ok := d.cmd.Wait().(*exec.ExitError); ok {
			d.code = ee.ExitCode()
		}
	}()
	t.Cleanup(func() {
		if code := d.stop(syscall.SIGTERM, 10*time.Second); code != 0 {
			t.Errorf("once serve exited %d after SIGTERM, want 0", code)
		}
		if t.Failed() {
			t.Logf("once serve log:\n%s", d.logText())
		}
	})
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		for _, l := range strings.Split(d.logText(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "serving" {
				base = strings.TrimSuffix(fmt.Sprint(m["url"]), "/")
			}
		}
		select {
		case <-d.done:
			t.Fatalf("once serve exited before it served:\n%s", d.logText())
		default:
		}
		if base == "" && time.Now().After(deadline) {
			t.Fatalf("once serve logged no serving line within 20 s:\n%s", d.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.TrimSpace(string(b)) == "ok" {
				return d, base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz did not answer ok within 10 s: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// browser is one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newBrowser(t *testing.T, chrome, shots string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // the tests run as root
		chromedp.Flag("headless", "new"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.DisableGPU,
		chromedp.Flag("lang", "en-US"),
		chromedp.Flag("accept-lang", "en-US"),
		chromedp.Env("LANGUAGE=en_US", "TZ=UTC"),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { tcancel(); cancel(); acancel() })
	b := &browser{t: t, ctx: tctx, shots: shots}
	b.do(chromedp.EmulateViewport(1280, 800))
	return b
}

func (b *browser) do(a ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, a...); err != nil {
		b.t.Fatalf("chromium: %v", err)
	}
}

// open navigates to u and waits for the page to load.
func (b *browser) open(u string) {
	b.t.Helper()
	b.do(chromedp.Navigate(u))
	b.waitJS(`document.readyState === "complete"`, 10*time.Second)
	if loc := evalJS[string](b, `location.pathname`); loc == "/login" && !strings.Contains(u, "/login") {
		b.t.Fatalf("%s: sent to the login page", u)
	}
}

// text is the text of the first element matching the CSS selector sel ("" when none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(evalJS[string](b, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel)))
}

func evalJS[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("chromium: %s: %v", js, err)
	}
	return v
}

// checkGoneDrawn: export-ledger's attempt, whose holder was killed, is drawn apart on its task's
// timeline (a colour of its own, not a running bar's, and a dashed outline), the legend names it in
// English and Chinese, and its run detail shows holder gone with the resolve command. rng is the
// timeline's from= and to=.
func checkGoneDrawn(t *testing.T, b *browser, base, rng string) {
	t.Helper()
	b.open(base + "/timeline?task=export-ledger&lang=en&" + rng)
	bars := evalJS[[]map[string]string](b, `Array.from(document.querySelectorAll("svg.timeline rect.bar")).map(r => ({
		class: r.getAttribute("class"), fill: getComputedStyle(r).fill, dash: getComputedStyle(r).strokeDasharray}))`)
	running := evalJS[string](b, `getComputedStyle(document.querySelector("ul.legend rect[class='bar running']")).fill`)
	if len(bars) != 1 || bars[0]["class"] != "bar running gone" || bars[0]["fill"] == running || bars[0]["dash"] == "none" {
		t.Errorf("export-ledger's timeline: bars %v, want one of class 'bar running gone', dashed, not filled %s as a running one", bars, running)
	}
	legend := evalJS[[]string](b, `Array.from(document.querySelectorAll("ul.legend li")).map(li => li.textContent.trim())`)
	if !slices.Contains(legend, "holder gone") || !slices.Contains(legend, "running") {
		t.Errorf("export-ledger's timeline: the legend is %q, want holder gone and running among it", legend)
	}
	b.shot("timeline-holder-gone")
	b.open(base + "/timeline?task=export-ledger&lang=zh-CN")
	if legend := evalJS[[]string](b, `Array.from(document.querySelectorAll("ul.legend li")).map(li => li.textContent.trim())`); !slices.Contains(legend, "持有者已失联") {
		t.Errorf("export-ledger's timeline in Chinese: the legend is %q, want 持有者已失联 among it", legend)
	}
	b.open(base + "/slot?task=export-ledger&slot=2026-05-01&lang=en")
	if got := b.text("main .status.s-gone"); got != "holder gone" {
		t.Errorf("export-ledger's run detail: %q, want a holder gone badge", got)
	}
	if got := b.text(`#gone pre.resolve-failed`); !strings.HasPrefix(got, "once resolve --task export-ledger --slot 2026-05-01 --as failed") {
		t.Errorf("export-ledger's run detail: the resolve command reads %q", got)
	}
}

// waitJS waits until the expression js is true in the page.
func (b *browser) waitJS(js string, within time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("chromium: %s not true within %s (%v)", js, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shot saves a PNG of the whole page as NAME.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
