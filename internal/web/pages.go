package web

import (
	"embed"
	"fmt"
	"html"
	"net/http"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

//go:embed static
var staticFS embed.FS

// view is what every page's template gets.
type view struct {
	tr       func(string) string
	Lang     string
	Zone     string
	Page     string // the template's name: the nav marks it
	Path     string // the page's path and query without lang and tz, for the switches
	CSRF     string
	LoggedIn bool
	CanWrite bool // a token is configured and this browser has a session
	HasToken bool
	DSN      string
	Version  string
	Flash    string
	Now      time.Time
	Data     any
}

func (s *Server) view(w http.ResponseWriter, r *http.Request, page string, data any) view {
	q := r.URL.Query()
	q.Del("lang")
	q.Del("tz")
	path := r.URL.Path
	if e := q.Encode(); e != "" {
		path += "?" + e
	}
	l := lang(w, r)
	v := view{tr: translator(l), Lang: l, Zone: zone(w, r), Page: page, Path: path, CSRF: s.csrf(r),
		LoggedIn: s.hasSession(r), CanWrite: s.hasSession(r), HasToken: s.c.Token != "",
		Flash: s.flash(r), Now: s.c.Now().UTC(), Data: data}
	// /login is open to anyone: the store's address and once's version are for readers only.
	if s.mayRead(r) {
		v.DSN, v.Version = s.c.DSN, s.c.Version
	}
	return v
}

// T is the text of key k in the page's language.
func (v view) T(k string) string { return v.tr(k) }

// S is an attempt's state or an event's kind in the page's language.
func (v view) S(st store.State) string { return v.tr("state_" + string(st)) }

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	v := s.view(w, r, name, data)
	var pg page
	layout(&pg, v, pageFuncs[name])
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(pg.b.Bytes())
}

// fail shows an error page: one line saying what was wrong.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		s.c.Log.Warn("page failed", "path", r.URL.Path, "err", msg)
	}
	s.render(w, r, status, "error", msg)
}

func (s *Server) failErr(w http.ResponseWriter, r *http.Request, err error) {
	err = s.storeErr(r, err)
	s.fail(w, r, statusOf(err), err.Error())
}

// when is a time as a page shows it: a <time> element with the instant, its text in UTC (app.js
// rewrites it in the reader's zone when they chose local).
func when(t any) safe {
	var tm time.Time
	switch v := t.(type) {
	case time.Time:
		tm = v
	case *time.Time:
		if v == nil {
			return "-"
		}
		tm = *v
	default:
		return "-"
	}
	if tm.IsZero() {
		return "-"
	}
	u := tm.UTC()
	return safe(fmt.Sprintf(`<time datetime="%s">%s</time>`, u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05Z")))
}

func attemptDur(a store.Attempt) string {
	if a.EndedAt == nil {
		return "-"
	}
	return fmtDur(a.EndedAt.Sub(a.StartedAt))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sparkline draws durations as an inline SVG polyline (server-side: no script, no CDN).
func sparkline(ds []float64) safe {
	if len(ds) < 2 {
		return ""
	}
	max := 0.0
	for _, d := range ds {
		max = maxf(max, d)
	}
	if max == 0 {
		max = 1
	}
	const w, h = 80.0, 18.0
	pts := make([]string, len(ds))
	for i, d := range ds {
		pts[i] = fmt.Sprintf("%.1f,%.1f", float64(i)*w/float64(len(ds)-1), h-1-(h-2)*d/max)
	}
	return safe(fmt.Sprintf(`<svg class="spark" width="%.0f" height="%.0f" role="img" aria-label="%s"><polyline points="%s"/></svg>`,
		w, h, html.EscapeString(fmt.Sprintf("%.1fs … %.1fs", ds[0], ds[len(ds)-1])), strings.Join(pts, " ")))
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

func (s *Server) pageOverview(w http.ResponseWriter, r *http.Request) {
	p, err := s.tasks(r.Context(), r.URL.Query().Get("after"), defaultPage)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "overview", p)
}

func (s *Server) pageTimeline(w http.ResponseWriter, r *http.Request) {
	from, to, task, err := s.timelineParams(r)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	tl, err := s.timeline(r.Context(), from, to, task)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "timeline", drawTimeline(tl, task))
}

func (s *Server) pageReview(w http.ResponseWriter, r *http.Request) {
	rs, total, err := s.reviews(r.Context(), maxPage)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "review", map[string]any{"Reviews": rs, "Total": total})
}

func (s *Server) formResolve(w http.ResponseWriter, r *http.Request) {
	req := resolveRequest{Task: r.PostFormValue("task"), Slot: r.PostFormValue("slot"), As: r.PostFormValue("as"),
		Note: r.PostFormValue("note"), By: r.PostFormValue("by")}
	att, err := s.resolve(r, req)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	msg := fmt.Sprintf("task %s slot %s attempt %d: %s", req.Task, orDash(req.Slot), att.Number, req.As)
	http.Redirect(w, r, s.flashURL("/review", msg), http.StatusSeeOther)
}

func (s *Server) pageLeases(w http.ResponseWriter, r *http.Request) {
	ls, err := s.leases(r.Context())
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "leases", ls)
}

func (s *Server) pageSlot(w http.ResponseWriter, r *http.Request) {
	d, err := s.slotDetail(r)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "slot", d)
}

func (s *Server) pageJobs(w http.ResponseWriter, r *http.Request) {
	js, err := s.jobs(r)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "jobs", map[string]any{"Jobs": js, "Daemon": s.c.Jobs != nil})
}

func (s *Server) formJob(w http.ResponseWriter, r *http.Request) {
	msg, err := s.jobAction(r, r.PostFormValue("job"), r.PostFormValue("action"), r.PostFormValue("by"), r.PostFormValue("note"))
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, s.flashURL("/jobs", msg), http.StatusSeeOther)
}

func (s *Server) pageLogin(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", map[string]string{"Next": localPath(r.URL.Query().Get("next")), "Error": ""})
}

// formLogin takes the token once and gives the browser a session cookie derived from it. It is
// taken from this origin only, as log out is.
func (s *Server) formLogin(w http.ResponseWriter, r *http.Request) {
	if s.c.Token == "" {
		s.c.Log.Warn("login refused", "from", r.RemoteAddr, "client", clientAddr(r))
		s.render(w, r, http.StatusUnauthorized, "login", map[string]string{"Next": localPath(r.PostFormValue("next")), "Error": s.tr(r)("readonly")})
		return
	}
	addr := clientAddr(r)
	// Another site's page must not send tokens from the operator's browser: each wrong one
	// would count against the operator's own address, holding their login up to 5 minutes.
	if !sameOrigin(r) {
		s.c.Log.Warn("login refused: a form of another site", "from", r.RemoteAddr, "client", addr)
		s.fail(w, r, http.StatusForbidden, s.tr(r)("csrf"))
		return
	}
	if wait := s.limit.held(addr); wait > 0 { // before the form is read
		s.tooMany(w, r, wait)
		return
	}
	next, tok := localPath(r.PostFormValue("next")), strings.TrimSpace(r.PostFormValue("token"))
	wait, ok := s.limit.check(addr, func() bool { return equal(tok, s.c.Token) })
	if wait > 0 {
		s.tooMany(w, r, wait)
		return
	}
	if !ok {
		s.c.Log.Warn("login refused", "from", r.RemoteAddr, "client", addr)
		s.render(w, r, http.StatusUnauthorized, "login", map[string]string{"Next": next, "Error": s.tr(r)("bad_token")})
		return
	}
	http.SetCookie(w, s.sessionCookie(r, s.sessionValue(s.c.Now().Add(sessionTTL)), int(sessionTTL/time.Second)))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// sessionCookie is the session cookie with value for maxAge seconds (negative: delete it):
// HttpOnly, SameSite=Strict, and Secure under TLS or behind a proxy that says the browser used
// https (without it the browser would send it to any plain http:// URL of the host name).
func (s *Server) sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: value, Path: "/", HttpOnly: true,
		Secure: s.tls || viaHTTPS(r), SameSite: http.SameSiteStrictMode, MaxAge: maxAge}
}

// formLogout ends the browser's session. It is taken from this origin only: another site's page
// cannot log an operator out. (The cookie is deleted in this browser; a copy made of it stays
// valid until its end, as the server keeps no sessions.)
func (s *Server) formLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.fail(w, r, http.StatusForbidden, s.tr(r)("csrf"))
		return
	}
	http.SetCookie(w, s.sessionCookie(r, "", -1))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
