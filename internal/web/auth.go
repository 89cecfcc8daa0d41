package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The access rules, in one place:
//
//   - A read (GET, HEAD) is open without credentials only when the listener is on loopback, the
//     request names a loopback host (Host header) and carries no header of a proxy
//     (X-Forwarded-For, Forwarded, Via, …), and Config.ReadsNeedToken is false: a page of another
//     site that rebinds its name to 127.0.0.1 is refused, and so is a request a reverse proxy on
//     this host forwards from anywhere (nginx and Apache name the backend, 127.0.0.1:8080, as its
//     Host by default). Otherwise it needs the token: the bearer header, or the session cookie a
//     browser gets at /login.
//   - A change needs the token always: API calls send it as a bearer header (no cookie is taken
//     for them, so no other page can make a browser send one); dashboard forms are taken with the
//     session cookie only when they also carry the CSRF token bound to it and come from this
//     origin (Sec-Fetch-Site, Origin). Log out and log in are taken from this origin only (a
//     login from another site's page would count wrong tokens against the operator's address).
//   - The session cookie is HttpOnly, SameSite=Strict, and Secure under TLS or behind a proxy
//     that says the browser used https (X-Forwarded-Proto, Forwarded: proto=https).
//   - Without a token configured nothing can be changed: the server is read-only.
//   - A wrong token (at /login, or a bearer header where the token is needed) counts against the
//     client's address (clientAddr); too many, from it or from everywhere, and its token checks
//     wait, answered 429 with Retry-After (limit.go).

const sessionCookie = "once_session"

// mac is HMAC-SHA256 of msg under the token: the session cookie and the CSRF token are derived
// from the token, so they need no server state and die with it (a new token logs everyone out).
func (s *Server) mac(msg string) string {
	h := hmac.New(sha256.New, []byte(s.c.Token))
	h.Write([]byte(msg))
	return hex.EncodeToString(h.Sum(nil))
}

// flashURL is path with msg to show once as the answer to a form (a redirect after a POST):
// msg goes in the query with its MAC, so that a link made elsewhere cannot put words in the
// banner ("Recorded: …" that nobody recorded).
func (s *Server) flashURL(path, msg string) string {
	return path + "?done=" + url.QueryEscape(msg) + "&ds=" + s.mac("flash|"+msg)
}

// flash is the message of r's flashURL, or "" when it has none or its MAC does not hold.
func (s *Server) flash(r *http.Request) string {
	q := r.URL.Query()
	msg := q.Get("done")
	if msg == "" || s.c.Token == "" || !hmac.Equal([]byte(q.Get("ds")), []byte(s.mac("flash|"+msg))) {
		return ""
	}
	return msg
}

// sessionTTL is how long a browser's session lasts: the server checks it, not only the cookie's
// MaxAge.
const sessionTTL = 12 * time.Hour

// sessionValue is a session cookie that ends at exp: "UNIX.MAC", the MAC binding the end to the
// token, so that a cookie cannot be made to last longer.
func (s *Server) sessionValue(exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + s.mac("session|"+e)
}

// session is r's session cookie when it is valid now, "" otherwise.
func (s *Server) session(r *http.Request) string {
	if s.c.Token == "" {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	e, m, ok := strings.Cut(c.Value, ".")
	exp, err := strconv.ParseInt(e, 10, 64)
	if !ok || err != nil || !equal(m, s.mac("session|"+e)) || s.c.Now().Unix() >= exp {
		return ""
	}
	return c.Value
}

// csrf is the CSRF token for the session presented with r ("" without one): bound to the session.
func (s *Server) csrf(r *http.Request) string {
	v := s.session(r)
	if v == "" {
		return ""
	}
	return s.mac("csrf|" + v)
}

// equal compares a secret with what a client sent in constant time, their lengths included
// (ConstantTimeCompare answers at once for two lengths): the digests are compared.
func equal(a, b string) bool {
	da, db := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(da[:], db[:]) == 1
}

// bearer reports whether r carries the token as "Authorization: Bearer TOKEN".
func (s *Server) bearer(r *http.Request) bool {
	if s.c.Token == "" {
		return false
	}
	tok, ok := bearerToken(r)
	return ok && equal(strings.TrimSpace(tok), s.c.Token)
}

// bearerToken is the credentials of r's Authorization header when its scheme is Bearer, in any
// case ("bearer", as some clients send it: an auth scheme is case-insensitive, RFC 9110 11.1).
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) < len("Bearer ") || !strings.EqualFold(h[:len("Bearer ")], "Bearer ") {
		return "", false
	}
	return h[len("Bearer "):], true
}

func (s *Server) hasSession(r *http.Request) bool { return s.session(r) != "" }

// loopbackHost reports whether r's Host names this machine's loopback: localhost or a loopback
// address, with any port.
func loopbackHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// proxyHeaders are headers a reverse proxy adds (nginx with the usual proxy_set_header lines,
// Apache's mod_proxy, Caddy, Traefik, HAProxy's forwardfor, Envoy) and a browser never sends.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Via"}

// proxied reports whether r came through a proxy: it may come from anywhere.
func proxied(r *http.Request) bool {
	for _, h := range proxyHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// viaHTTPS reports whether a proxy says the browser used https (TLS ends at the proxy), in any
// hop of a chain of proxies ("https, http"). A client that sends it falsely only makes its own
// cookie Secure.
func viaHTTPS(r *http.Request) bool {
	for _, v := range r.Header.Values("X-Forwarded-Proto") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "https") {
				return true
			}
		}
	}
	for _, f := range r.Header.Values("Forwarded") {
		for _, part := range strings.FieldsFunc(f, func(c rune) bool { return c == ';' || c == ',' }) {
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			if strings.EqualFold(k, "proto") && strings.EqualFold(strings.Trim(v, `"`), "https") {
				return true
			}
		}
	}
	return false
}

// mayRead reports whether r may read. It counts nothing: a page's rendering asks it too.
func (s *Server) mayRead(r *http.Request) bool {
	return s.openRead(r) || s.hasSession(r) || s.bearer(r)
}

// openRead reports whether r may read without credentials: on loopback, not through a proxy.
func (s *Server) openRead(r *http.Request) bool {
	return s.loopback && !s.c.ReadsNeedToken && !proxied(r) && loopbackHost(r)
}

// checkBearer checks r's bearer header where the token decides (a read beyond the open rule, a
// change), under the limit on wrong tokens (limit.go): while the client's address waits, nothing
// is checked and 429 is answered (answered true); a wrong token counts against the address, the
// right one clears it. A request without a "Bearer " header guessed nothing: it is not held.
func (s *Server) checkBearer(w http.ResponseWriter, r *http.Request) (ok, answered bool) {
	if _, ok := bearerToken(r); s.c.Token == "" || !ok {
		return false, false
	}
	wait, ok := s.limit.check(clientAddr(r), func() bool { return s.bearer(r) })
	if wait > 0 {
		s.tooMany(w, r, wait)
		return false, true
	}
	return ok, false
}

// tooMany answers a token check held by the limit: 429 with Retry-After. It is not logged: the
// line was written when the wait began.
func (s *Server) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := strconv.Itoa(int((wait + time.Second - 1) / time.Second))
	w.Header().Set("Retry-After", secs)
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if r.URL.Path == "/login" && r.Header.Get("Authorization") == "" {
		msg := strings.ReplaceAll(s.tr(r)("too_many"), "{n}", secs)
		s.render(w, r, http.StatusTooManyRequests, "login", map[string]string{"Next": localPath(r.PostFormValue("next")), "Error": msg})
		return
	}
	apiError(w, http.StatusTooManyRequests, "too many wrong tokens from "+clientAddr(r)+": try again in "+secs+" s with the token of once serve --token-file")
}

// needToken answers a read that needs the token and has none that holds: 401 to an API or
// metrics client, the login page to a browser.
func needToken(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/metrics" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="once"`)
		apiError(w, http.StatusUnauthorized, "this server needs its token: send Authorization: Bearer TOKEN (the token file given to once serve --token-file)")
		return
	}
	http.Redirect(w, r, "/login?next="+safeNext(r.URL.RequestURI()), http.StatusSeeOther)
}

// sameOrigin reports whether a browser form came from this server's own pages.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		_, host, _ := strings.Cut(o, "://")
		return strings.EqualFold(host, r.Host)
	}
	return true
}

// guard applies the read rule and the headers every answer carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("Cache-Control", "no-store")
		if s.tls {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if r.RequestURI == "*" { // "POST * HTTP/1.1" (OPTIONS * is net/http's): ServeMux answered 400, empty
			apiError(w, http.StatusBadRequest, "a request for * names no page or API call: give a path, such as /api/v1/tasks")
			return
		}
		open := r.URL.Path == "/healthz" || r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
		if !open && !s.openRead(r) && !s.hasSession(r) {
			ok, answered := s.checkBearer(w, r)
			if answered {
				return
			}
			if !ok {
				needToken(w, r)
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if !open {
			var done func()
			var ok bool
			if r, done, ok = s.enter(w, r); !ok {
				return
			}
			defer done()
		}
		next.ServeHTTP(w, r)
	})
}

// admit takes one of places (s.inFlight or s.scrapes) for r, waiting up to busyWait for one;
// false when none came free (or the client left). The place is given back by receiving from places.
func (s *Server) admit(r *http.Request, places chan struct{}) bool {
	select {
	case places <- struct{}{}:
		return true
	default:
	}
	var hangs <-chan struct{} // nil for a scrape: scrapes do not wait on the dashboard's store
	if places == s.inFlight {
		if hangs = s.hangWake(); s.hanging() {
			return false // busy says the store hangs: waiting for a place would not help
		}
	}
	t := time.NewTimer(s.busyWait)
	defer t.Stop()
	select {
	case places <- struct{}{}:
		if hangs != nil && s.hanging() { // the place came from a request the store left waiting
			<-places
			return false
		}
		return true
	case <-hangs: // a request in a place met the store hanging: so would this one
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// busy answers a request refused by admit: 503, try again in a moment; while the store hangs
// (hanging), that the store hangs.
func (s *Server) busy(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	if r.URL.Path != "/metrics" && s.hanging() {
		s.hangAnswer(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/metrics" {
		s.c.Log.Warn("request failed", "path", r.URL.Path, "err", "busy", "from", r.RemoteAddr)
		apiError(w, http.StatusServiceUnavailable, "this server is answering as many requests as it takes at once: try again in a moment")
		return
	}
	s.fail(w, r, http.StatusServiceUnavailable, s.tr(r)("busy"))
}

// write wraps an API call that changes something: the bearer token is required.
func (s *Server) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.c.Token == "":
			apiError(w, http.StatusForbidden, "this server is read-only: start once serve with --token-file to allow changes")
		default:
			ok, answered := s.checkBearer(w, r)
			switch {
			case answered:
			case !ok:
				w.Header().Set("WWW-Authenticate", `Bearer realm="once"`)
				apiError(w, http.StatusUnauthorized, "a change needs the token: send Authorization: Bearer TOKEN")
			default:
				h(w, r)
			}
		}
	}
}

// formWrite wraps a dashboard form that changes something: a session, its CSRF token and this
// origin are required.
func (s *Server) formWrite(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := s.tr(r)
		switch {
		case s.c.Token == "":
			s.fail(w, r, http.StatusForbidden, t("readonly"))
		case !s.hasSession(r):
			http.Redirect(w, r, "/login?next="+safeNext(r.URL.RequestURI()), http.StatusSeeOther)
		case !sameOrigin(r) || !equal(r.PostFormValue("csrf"), s.csrf(r)):
			s.fail(w, r, http.StatusForbidden, t("csrf"))
		default:
			h(w, r)
		}
	}
}

// safeNext keeps a redirect target on this server: a path, never a URL to elsewhere.
func safeNext(u string) string {
	return url.QueryEscape(localPath(u))
}

// localPath is a redirect target taken from a form: a path on this server, or "/". A browser
// drops tabs and newlines from a Location and reads a backslash as a slash, so "/\t/evil.example"
// would be "//evil.example", another site: any control character or backslash is refused, and
// what is left must parse as a path alone (no scheme, no host).
func localPath(u string) string {
	if !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") || strings.ContainsFunc(u, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	if p, err := url.Parse(u); err != nil || p.Scheme != "" || p.Host != "" || p.User != nil {
		return "/"
	}
	return u
}
