package web

import (
	"fmt"
	"sort"
	"strings"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// The dashboard's pages, written with page.p (html.go: every value escaped unless safe). One
// function a page; layout wraps them.

// pageFuncs are the pages by name.
var pageFuncs = map[string]func(w *page, v view){
	"error": renderError, "login": renderLogin, "overview": renderOverview, "timeline": renderTimeline,
	"review": renderReview, "leases": renderLeases, "slot": renderSlot, "jobs": renderJobs,
	"keys": renderScopes, "scope": renderScope,
}

// pageTitle is the page's name, and what it shows when that is one task, slot or scope: a
// browser's tabs and history (and a screen reader) named every run detail "slot".
func pageTitle(v view) string {
	t := v.T(v.Page)
	switch d := v.Data.(type) {
	case SlotDetail:
		t = d.Task + " · " + orDash(d.Slot)
	case drawn:
		if d.Task != "" {
			t += ": " + d.Task
		}
	case KeysPage:
		if v.Page == "scope" && d.Scope != "" {
			t += " · " + d.Scope
		}
	}
	return t
}

func layout(w *page, v view, content func(*page, view)) {
	w.p(`<!doctype html>
<html lang="%s" data-tz="%s">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s · once</title>
<link rel="stylesheet" href="/static/app.css">
<script src="/static/app.js" defer></script>
</head>
<body>
<header>
  <a class="brand" href="/">once</a>
  <nav>`, v.Lang, v.Zone, pageTitle(v))
	for _, n := range []struct{ page, href string }{{"overview", "/"}, {"timeline", "/timeline"}, {"review", "/review"}, {"leases", "/leases"}, {"jobs", "/jobs"}, {"keys", "/keys"}} {
		cur := safe("")
		if v.Page == n.page || v.Page == "scope" && n.page == "keys" {
			cur = ` aria-current="page"`
		}
		w.p("\n    <a href=\"%s\"%s>%s</a>", n.href, cur, v.T(n.page))
	}
	sep := "?"
	if strings.Contains(v.Path, "?") {
		sep = "&"
	}
	self := v.Path + sep
	// The zone in use is marked: a local time's text (app.js) names its zone, but the switch
	// is what tells a reader that the page is in UTC, or in their own zone.
	utc, local := safe(` aria-current="true"`), safe("")
	if v.Zone == "local" {
		utc, local = local, utc
	}
	w.p(`
  </nav>
  <span class="switch">
    <a href="%slang=en" lang="en">English</a> ·
    <a href="%slang=zh-CN" lang="zh-CN">简体中文</a> ·
    %s: <a href="%stz=utc"%s>%s</a> /
    <a href="%stz=local"%s>%s</a>
  </span>
  <span class="session">`, self, self, v.T("times"), self, utc, v.T("utc"), self, local, v.T("local"))
	switch {
	case v.LoggedIn:
		w.p(`<form method="post" action="/logout"><button>%s</button></form>`, v.T("logout"))
	case v.HasToken:
		w.p(`<a href="/login?next=%s">%s</a>`, q(v.Path), v.T("login"))
	}
	w.p("</span>\n</header>\n<main>\n")
	if v.Flash != "" {
		w.p(`<p class="flash" role="status">%s: %s</p>`+"\n", v.T("resolved"), v.Flash)
	}
	content(w, v)
	w.p("\n</main>\n<footer>")
	if v.DSN != "" {
		w.p("%s: <code>%s</code> · once %s · ", v.T("store"), v.DSN, v.Version)
	}
	w.p("%s</footer>\n</body>\n</html>\n", when(v.Now))
}

func renderError(w *page, v view) {
	w.p(`<h1>%s</h1><p class="error" role="alert">%s</p><p><a href="/">%s</a></p>`, v.T("error"), fmt.Sprint(v.Data), v.T("back"))
}

func renderLogin(w *page, v view) {
	d := v.Data.(map[string]string)
	w.p(`<h1>%s</h1>`, v.T("login"))
	if d["Error"] != "" {
		w.p(`<p class="error" role="alert">%s</p>`, d["Error"])
	}
	w.p(`<form method="post" action="/login" class="login"><input type="hidden" name="next" value="%s">
<label>%s <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">%s</button></form>`, d["Next"], v.T("token_label"), v.T("login"))
}

// slotLink is the href of a slot's page.
func slotLink(task, slot string) safe { return "/slot?task=" + q(task) + "&amp;slot=" + q(slot) }

func statusBadge(class, text string) safe {
	return safe(fmt.Sprintf(`<span class="status s-%s">%s</span>`, esc(class), esc(text)))
}

func renderOverview(w *page, v view) {
	p := v.Data.(TaskPage)
	w.p(`<h1>%s</h1>`, v.T("overview"))
	renderGone(w, v, p.Running)
	if len(p.Tasks) == 0 {
		w.p(`<p>%s</p>`, v.T("no_tasks"))
		return
	}
	w.p(`<table class="tasks"><thead><tr><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th></tr></thead><tbody>`,
		v.T("task"), v.T("status"), v.T("last"), v.T("last_success"), v.T("next"), v.T("trend"))
	for _, t := range p.Tasks {
		w.p(`<tr data-task="%s"><td><a href="/timeline?task=%s">%s</a></td><td>%s`, t.Task, q(t.Task), t.Task, statusBadge(t.Status, v.T("status_"+t.Status)))
		if t.Waiting > 0 {
			w.p(" (%d)", t.Waiting)
		}
		if t.Lease != nil {
			w.p(` <span class="holder">%s</span>`, t.Lease.Holder)
		}
		if len(t.Gone) > 0 && t.Status != statusGone {
			w.p(` %s`, statusBadge(statusGone, v.T("status_gone")))
		}
		w.p("</td><td>")
		if a := t.Last; a != nil {
			w.p(`<a href="%s">%s #%d</a> %s · %s · %s`, slotLink(a.Task, a.Slot), orDash(a.Slot), a.Number, v.S(a.State), when(a.StartedAt), attemptDur(*a))
		} else {
			w.p("-")
		}
		switch { // not known: the newest attempts read held none
		case t.LastSuccessUnknown && t.NoSuccessIn > 0:
			w.p(`</td><td><span class="muted">%s</span>`, strings.ReplaceAll(v.T("no_success_in"), "{n}", fmt.Sprint(t.NoSuccessIn)))
		case t.LastSuccessUnknown:
			w.p(`</td><td><span class="muted">%s</span>`, v.T("success_unknown"))
		default:
			w.p(`</td><td>%s`, when(t.LastSuccess))
		}
		w.p(`</td><td>%s</td><td>%s</td></tr>`, when(t.Next), sparkline(t.Durations))
	}
	w.p("</tbody></table>")
	if p.Next != "" {
		w.p(`<p><a href="/?after=%s">%s →</a></p>`, q(p.Next), v.T("more"))
	}
}

// renderGone is the overview's section on the attempts still recorded as running whose holder's
// lease is gone: what it means and, per attempt, the once resolve commands that settle it now (or
// the grant of its task that is live, while once resolve would refuse), then what the store could
// not list.
func renderGone(w *page, v view, sec RunningSection) {
	n := 0
	for _, r := range sec.Running {
		if r.Lease == store.LeaseGone {
			n++
		}
	}
	if n > 0 {
		w.p(`<section class="gone" id="gone"><h2>%s (%d)</h2><p>%s</p>`, v.T("gone"), n, v.T("gone_intro"))
	}
	for _, r := range sec.Running {
		if r.Lease == store.LeaseGone {
			renderGoneAttempt(w, v, r)
		}
	}
	if n > 0 && sec.PasswordHidden {
		w.p(`<p class="hint">%s</p>`, v.T("pw_hidden"))
	}
	if n > 0 {
		w.p(`</section>`)
	}
	switch {
	case sec.Error != "":
		w.p(`<p class="warn running-note">%s %s</p>`, v.T("running_error"), sec.Error)
	case !sec.Listed:
		w.p(`<p class="muted running-note">%s</p>`, v.T("running_unlistable"))
	case sec.More:
		w.p(`<p class="warn running-note">%s</p>`, strings.ReplaceAll(v.T("running_more"), "{n}", fmt.Sprint(len(sec.Running))))
	}
	if len(sec.Unlisted) > 0 {
		w.p(`<p class="muted running-note">%s %s</p>`, v.T("running_unlisted"), strings.Join(sec.Unlisted, ", "))
	}
}

// renderGoneAttempt is one attempt whose holder is gone: who held it and the once resolve commands
// that settle it now, or the grant of its task that is live (once resolve would refuse).
func renderGoneAttempt(w *page, v view, r Running) {
	w.p(`<div class="gone-attempt" data-task="%s" data-slot="%s"><h3><a href="%s">%s · %s</a> · %s #%d</h3>`,
		r.Task, r.Slot, slotLink(r.Task, r.Slot), r.Task, orDash(r.Slot), v.T("attempt"), r.Number)
	w.p(`<p>%s %s · %s <code>%s</code> · %s %d · %s %s</p>`, v.T("holder"), r.Holder, v.T("run_id"), r.RunID, v.T("token"), r.Token, v.T("started"), when(r.StartedAt))
	if l := r.HeldBy; l != nil {
		w.p(`<p class="held">%s</p></div>`, strings.NewReplacer("{holder}", l.Holder, "{token}", fmt.Sprint(l.Token)).Replace(v.T("gone_held")))
		return
	}
	w.p(`<p>%s</p><pre class="cmd resolve-failed"><code>%s</code></pre><p>%s</p><pre class="cmd resolve-succeeded"><code>%s</code></pre></div>`,
		v.T("gone_again"), r.Resolve.Failed, v.T("gone_done"), r.Resolve.Succeeded)
}

// renderLegend says what the timeline's colours and marks mean, with the page's own classes.
func renderLegend(w *page, v view) {
	w.p(`<ul class="legend"><li class="legend-title">%s:</li>`, v.T("legend_attempts"))
	for _, k := range []struct{ class, label string }{
		{"running", v.S(store.Running)}, {"succeeded", v.S(store.Succeeded)}, {"failed", v.S(store.Failed)},
		{"unknown", v.S(store.Unknown)}, {"running gone", v.T("status_gone")}, {"overlap", v.T("legend_overlap")},
	} {
		w.p(`<li><svg width="18" height="10"><rect class="bar %s" width="18" height="10"/></svg> %s</li>`, k.class, k.label)
	}
	w.p(`<li class="legend-title">%s:</li>`, v.T("events"))
	for _, k := range []store.State{store.Busy, store.Skipped, store.Review, store.Missed} {
		w.p(`<li><svg width="10" height="10"><path class="mark %s" d="M5 10 l-4 -7 h8 z"/></svg> %s</li>`, k, v.S(k))
	}
	w.p(`</ul>`)
}

func renderTimeline(w *page, v view) {
	d := v.Data.(drawn)
	title := v.T("timeline")
	if d.Task != "" {
		title += ": " + d.Task
	}
	w.p(`<h1>%s</h1><form method="get" action="/timeline" class="range">`, title)
	if d.Task != "" {
		w.p(`<input type="hidden" name="task" value="%s">`, d.Task)
	}
	w.p(`<label>%s <input name="from" value="%s"></label> <label>%s <input name="to" value="%s"></label>
<button type="submit">%s</button> <a href="/timeline?%s" aria-label="%s" title="%s">←</a> <a href="/timeline?%s" aria-label="%s" title="%s">→</a></form>`,
		v.T("from"), d.FromParam, v.T("to"), d.ToParam, v.T("show"), d.Earlier, v.T("earlier"), v.T("earlier"), d.Later, v.T("later"), v.T("later"))
	if d.Truncated {
		w.p(`<p class="warn">%s</p>`, v.T("truncated"))
	}
	w.p(`<svg class="timeline" width="%v" height="%v" role="img" aria-label="%s">`, d.Width, d.Height, v.T("timeline"))
	// A task's name is cut at its column (its title gives it whole): it ran over the bars.
	w.p(`<clipPath id="labels"><rect width="%v" height="%v"/></clipPath>`, d.Label-4, d.Height)
	// The axis is drawn on the server, in UTC whatever the page's zone: it says so.
	w.p(`<text class="tickzone" x="4" y="14">UTC</text>`)
	for _, t := range d.Ticks {
		w.p(`<line class="tick" x1="%v" x2="%v" y1="20" y2="%v"/><text class="ticktext" x="%v" y="14">%s</text>`, t.X, t.X, d.Height, t.X, t.Text)
	}
	for _, r := range d.Rows {
		w.p(`<g class="row" data-task="%s"><text class="label" x="4" y="%v" clip-path="url(#labels)"><title>%s</title>%s</text>`, r.Task, r.LabelY, r.Task, r.Task)
		for _, b := range r.Bars {
			w.p(`<a href="%s"><rect class="%s" x="%v" y="%v" width="%v" height="%v" data-holder="%s" data-run="%s"><title>%s</title></rect></a>`,
				slotLink(b.Task, b.Slot), b.Class, b.X, b.Y, b.W, b.H, b.Holder, b.RunID, b.Title)
		}
		for _, m := range r.Marks {
			w.p(`<path class="mark %s" d="%s"><title>%s</title></path>`, m.Kind, m.D, m.Title)
		}
		w.p("</g>")
	}
	w.p(`</svg>`)
	renderLegend(w, v)
	w.p(`<h2>%s (%d)</h2>`, v.T("overlaps"), len(d.Overlaps))
	if len(d.Overlaps) == 0 {
		w.p(`<p>%s</p>`, v.T("no_overlaps"))
		return
	}
	w.p(`<ul class="overlaps">`)
	for _, o := range d.Overlaps {
		w.p(`<li class="overlap"><b>%s</b>: %s (%s, slot %s, %s) %s %s (%s, slot %s, %s)</li>`, o.Task,
			o.A.Holder, o.A.RunID, orDash(o.A.Slot), when(o.A.Start), v.T("overlap_with"), o.B.Holder, o.B.RunID, orDash(o.B.Slot), when(o.B.Start))
	}
	w.p("</ul>")
}

func renderReview(w *page, v view) {
	d := v.Data.(map[string]any)
	rs := d["Reviews"].([]Review)
	w.p(`<h1>%s (%d)</h1>`, v.T("review"), d["Total"].(int))
	if len(rs) == 0 {
		w.p(`<p>%s</p>`, v.T("no_review"))
	}
	for _, r := range rs {
		w.p(`<section class="review" data-task="%s" data-slot="%s"><h2><a href="%s">%s · %s</a></h2>`, r.Task, r.Slot, slotLink(r.Task, r.Slot), r.Task, orDash(r.Slot))
		if a := r.Last; a != nil {
			w.p(`<h3>%s</h3><dl class="evidence">`, v.T("evidence"))
			w.p(`<dt>%s</dt><dd>#%d %s</dd><dt>%s</dt><dd>%s</dd><dt>%s</dt><dd>%s</dd><dt>%s</dt><dd>%s</dd>`,
				v.T("attempt"), a.Number, statusBadge(string(a.State), v.S(a.State)), v.T("holder"), a.Holder, v.T("started"), when(a.StartedAt), v.T("ended"), when(a.EndedAt))
			w.p(`<dt>%s</dt><dd><code>%s</code> · %s %d</dd><dt>%s</dt><dd>%d`, v.T("run_id"), a.RunID, v.T("token"), a.Token, v.T("records"), a.Records)
			if a.Progress != "" {
				w.p(` · %s %s`, v.T("progress"), a.Progress)
			}
			w.p(`</dd><dt>%s</dt><dd>%s</dd><dt>%s</dt><dd>%s</dd></dl>`, v.T("checkpoint"), orDash(a.Checkpoint), v.T("note"), orDash(a.Note))
		}
		if l := r.Lease; l != nil {
			w.p(`<p>%s: %s (%s), %s %s</p>`, v.T("lease_now"), l.Holder, l.RunID, v.T("expires"), when(l.Expires))
		}
		if len(r.History) > 0 {
			w.p(`<details><summary>%s (%d)</summary><table><tbody>`, v.T("history"), len(r.History))
			for _, e := range r.History {
				w.p(`<tr><td>%s</td><td>%s</td><td>#%d</td><td>%s</td><td>%s</td></tr>`, when(e.StartedAt), v.S(e.State), e.Number, e.Holder, orDash(e.Note))
			}
			w.p(`</tbody></table></details>`)
		}
		if r.Tail != "" {
			w.p(`<h3>%s</h3><pre class="tail">%s</pre>`, v.T("output"), r.Tail)
		} else if r.TailNotRead {
			w.p(`<h3>%s</h3><p><a href="%s">%s</a></p>`, v.T("output"), slotLink(r.Task, r.Slot), v.T("tail on the slot"))
		}
		switch {
		case v.CanWrite:
			w.p(`<form method="post" action="/review" class="resolve"><input type="hidden" name="csrf" value="%s"><input type="hidden" name="task" value="%s"><input type="hidden" name="slot" value="%s">
<label>%s <textarea name="note" required maxlength="4096"></textarea></label>
<label>%s <input name="by" required maxlength="200"></label>
<button name="as" value="succeeded" class="ok">%s</button> <button name="as" value="failed" class="failed">%s</button></form>`,
				v.CSRF, r.Task, r.Slot, v.T("note_required"), v.T("by"), v.T("resolve_ok"), v.T("resolve_failed"))
		case v.HasToken:
			w.p(`<p><a href="/login?next=/review">%s</a></p>`, v.T("login"))
		default:
			w.p(`<p class="muted">%s</p>`, v.T("readonly"))
		}
		w.p("</section>")
	}
}

func renderLeases(w *page, v view) {
	ls := v.Data.([]LeaseRow)
	hidden := safe("")
	if len(ls) > 0 {
		hidden = " hidden"
	}
	w.p(`<h1>%s <small class="muted">(%s)</small></h1><p id="no-leases"%s>%s</p>
<table class="leases" id="leases" data-live="/api/v1/leases"><thead><tr><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th></tr></thead><tbody>`,
		v.T("leases"), v.T("live"), hidden, v.T("no_leases"), v.T("task"), v.T("slot"), v.T("holder"), v.T("token"), v.T("progress"), v.T("records"), v.T("acquired"), v.T("expires"))
	for _, l := range ls {
		w.p(`<tr data-task="%s"><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>`, l.Task, l.Task, orDash(l.Slot), l.Holder, l.Token)
		if l.Total > 0 {
			w.p(`<progress max="%v" value="%v"></progress> <span class="pct">%.0f%%</span>`, l.Total, l.Done, 100*l.Done/l.Total)
		} else {
			w.p("%s", orDash(l.Progress))
		}
		w.p(`</td><td class="records">%d</td><td>%s</td><td>%s</td></tr>`, l.Records, when(l.Acquired), when(l.Expires))
	}
	w.p("</tbody></table>")
}

func renderSlot(w *page, v view) {
	d := v.Data.(SlotDetail)
	w.p(`<h1>%s · %s</h1><p>%s: `, d.Task, orDash(d.Slot), v.T("status"))
	if d.Waiting {
		w.p("%s", statusBadge("review", v.T("status_review")))
	} else if a := d.Last; a != nil {
		w.p("%s", statusBadge(string(a.State), v.S(a.State)))
		if d.HolderGone != nil {
			w.p(" %s", statusBadge(statusGone, v.T("status_gone")))
		}
		if res := a.Resolution; res != nil {
			w.p(` · %s %s`, v.T("resolved_as"), statusBadge(string(res.As), v.S(res.As)))
		}
	}
	w.p(` · %s: %s · <a href="/timeline?task=%s">%s</a></p>`, v.T("checkpoint"), orDash(d.Checkpoint), q(d.Task), v.T("timeline"))
	if r := d.HolderGone; r != nil {
		w.p(`<section class="gone" id="gone"><h2>%s</h2><p>%s</p>`, v.T("gone"), v.T("gone_intro"))
		renderGoneAttempt(w, v, *r)
		w.p(`</section>`)
	}
	w.p(`<h2>%s</h2>`, v.T("history"))
	for _, e := range d.History {
		w.p(`<section class="entry e-%s"><h3>%s · %s`, e.State, when(e.StartedAt), v.S(e.State))
		if e.Number > 0 {
			w.p(` · %s #%d`, v.T("attempt"), e.Number)
		}
		w.p(` · %s</h3>`, e.Holder)
		if !e.State.IsAttempt() {
			w.p(`<p>%s</p></section>`, orDash(e.Note))
			continue
		}
		code := "-"
		if e.ExitCode != nil {
			code = fmt.Sprint(*e.ExitCode)
		}
		w.p(`<dl><dt>%s</dt><dd><code>%s</code></dd><dt>%s</dt><dd>%d</dd><dt>%s</dt><dd>%s (%s)</dd><dt>%s</dt><dd>%s</dd><dt>%s</dt><dd>%d`,
			v.T("run_id"), e.RunID, v.T("token"), e.Token, v.T("ended"), when(e.EndedAt), attemptDur(e.Attempt), v.T("exit"), code, v.T("records"), e.Records)
		if e.Progress != "" {
			w.p(" · %s", e.Progress)
		}
		w.p(`</dd><dt>%s</dt><dd>%s</dd><dt>%s</dt><dd>%s</dd>`, v.T("checkpoint"), orDash(e.Checkpoint), v.T("note"), orDash(e.Note))
		if res := e.Resolution; res != nil {
			w.p(`<dt>%s</dt><dd class="resolution">%s · %s · %s · %s</dd>`, v.T("resolution"), v.S(res.As), res.By, when(res.At), res.Note)
		}
		env := d.Env[e.RunID]
		names := make([]string, 0, len(env))
		for k := range env {
			names = append(names, k)
		}
		sort.Strings(names)
		w.p(`<dt>%s</dt><dd><pre>`, v.T("env"))
		for _, k := range names {
			w.p("%s=%s\n", k, env[k])
		}
		w.p(`</pre></dd></dl>`)
		if t := d.Tails[e.RunID]; t != "" {
			w.p(`<h4>%s</h4><pre class="tail">%s</pre>`, v.T("output"), t)
		}
		w.p("</section>")
	}
}

func renderJobs(w *page, v view) {
	d := v.Data.(map[string]any)
	w.p(`<h1>%s</h1>`, v.T("jobs"))
	if !d["Daemon"].(bool) {
		w.p(`<p>%s</p>`, v.T("no_jobs"))
		return
	}
	w.p(`<table class="jobs"><thead><tr><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th></th></tr></thead><tbody>`,
		v.T("task"), v.T("schedule"), v.T("next"), v.T("status"), v.T("running_on"), v.T("last"))
	for _, j := range d["Jobs"].([]scheduler.JobInfo) {
		w.p(`<tr data-job="%s"><td><a href="/timeline?task=%s">%s</a></td><td><code>%s</code>`, j.Name, q(j.Name), j.Name, j.Schedule)
		if j.TZ != "" {
			w.p(" (%s)", j.TZ)
		}
		w.p("</td><td>")
		for _, t := range j.Next {
			w.p("%s<br>", when(t))
		}
		w.p("</td><td>")
		if j.Paused != nil {
			w.p("%s %s", statusBadge("paused", v.T("paused")), j.Paused.RunID)
		} else {
			w.p("%s", statusBadge("ok", v.T("active")))
		}
		if j.Trigger != "" {
			w.p(" · %s: %s", v.T("trigger"), j.Trigger)
		}
		running := "-"
		if j.Running != nil {
			running = j.Running.Holder
			if j.Holders > 1 {
				running += fmt.Sprintf(" +%d", j.Holders-1)
			}
		}
		w.p("</td><td>%s</td><td>", running)
		if a := j.Last; a != nil {
			w.p(`<a href="%s">%s</a> %s %s`, slotLink(a.Task, a.Slot), orDash(a.Slot), v.S(a.State), when(a.StartedAt))
		} else {
			w.p("%s", v.T("never"))
		}
		w.p("</td><td>")
		if v.CanWrite {
			action, label := "pause", v.T("pause")
			if j.Paused != nil {
				action, label = "resume", v.T("resume")
			}
			w.p(`<form method="post" action="/jobs" class="inline"><input type="hidden" name="csrf" value="%s"><input type="hidden" name="job" value="%s"><button name="action" value="%s">%s</button> <button name="action" value="trigger">%s</button></form>`,
				v.CSRF, j.Name, action, label, v.T("trigger"))
		}
		w.p("</td></tr>")
	}
	w.p("</tbody></table>")
}
