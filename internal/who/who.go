// Package who names who runs this process, for history: the default holder USER@HOST:PID
// (once.DefaultHolder, the daemon's node) and the default decider USER@HOST (once resolve --by,
// once pause). It also reads a holder back (Parse), in this form and in the HOST:PID form an
// older once wrote, which may share the store.
//
// USER is the name of the effective uid, read from the user database once per process (on
// Linux with the release binary, built without cgo, /etc/passwd only; NSS or macOS's directory
// otherwise); a uid without a name is written as its number. Under sudo
// by another user it is "SUDOER(USER)", e.g. alice(root): SUDO_USER names the person, but any
// process can set it, so it is shown only beside the effective user, which is always there.
package who

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/once-run/once/store"
)

// env is what the names are made of, so that tests can give any uid, user database and SUDO_USER.
type env struct {
	euid   int                                  // os.Geteuid(); -1 where there is none (Windows)
	lookup func(uid string) (*user.User, error) // user.LookupId
	sudo   string                               // $SUDO_USER
	host   string
	pid    int
}

func current() env {
	return env{euid: os.Geteuid(), lookup: lookupID, sudo: os.Getenv("SUDO_USER"), host: Host(), pid: os.Getpid()}
}

// Host is this host's name as once writes it in a holder, a decider and a notification: the
// kernel's host name with each byte that is not part of a printable character (invalid UTF-8, a
// control character: the kernel takes any 64 bytes) written as %XX, so that a careless
// `hostname` does not make every default holder one the store refuses; "localhost" when there is
// none. A name that was valid is unchanged.
func Host() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return escapeHost(h)
}

func escapeHost(h string) string {
	if printable(h) && utf8.ValidString(h) {
		return h
	}
	var b strings.Builder
	for i := 0; i < len(h); {
		r, n := utf8.DecodeRuneInString(h[i:])
		if r == utf8.RuneError && n <= 1 || !store.Printable(r) {
			for _, c := range []byte(h[i : i+max(n, 1)]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		} else {
			b.WriteString(h[i : i+n])
		}
		i += max(n, 1)
	}
	return b.String()
}

// names keeps the name found for each uid, "" for a uid without one: a library's caller may start
// a run many times a second, and each would read the user database again (a container's uid has
// no name more often than not, so a miss is kept too).
var names sync.Map // string → string

func lookupID(uid string) (*user.User, error) {
	if n, ok := names.Load(uid); ok {
		if n == "" {
			return nil, user.UnknownUserIdError(0)
		}
		return &user.User{Uid: uid, Username: n.(string)}, nil
	}
	u, err := user.LookupId(uid)
	switch {
	case err == nil:
		names.Store(uid, u.Username)
	case errors.As(err, new(user.UnknownUserIdError)):
		names.Store(uid, "")
	}
	return u, err
}

// Holder is the default holder: "USER@HOST:PID" (see the package comment). It passes
// store.CheckName within store.MaxHolderLen whenever "HOST:PID" does: a name that does not fit is
// shortened to the uid's number, then left out ("HOST:PID", the older form).
func Holder() string { return current().holder(store.MaxHolderLen) }

// HolderWithin is Holder held to max bytes, for a caller that adds to it (once drill's
// "drill-N/"), so that what worked with "HOST:PID" still does.
func HolderWithin(max int) string { return current().holder(max) }

// Decider is the default name of a person's decision: "USER@HOST", held to store.MaxByLen as
// Holder is to its limit.
func Decider() string { return current().decider() }

func (e env) holder(max int) string {
	tail := "@" + e.host + ":" + strconv.Itoa(e.pid)
	for _, u := range e.users() {
		if h := u + tail; store.CheckName("holder", h, max) == nil {
			return h
		}
	}
	return e.host + ":" + strconv.Itoa(e.pid)
}

func (e env) decider() string {
	for _, u := range e.users() {
		if d := u + "@" + e.host; store.CheckName("by", d, store.MaxByLen) == nil {
			return d
		}
	}
	return "unknown@" + e.host
}

// users lists the names of this process's user, best first: SUDOER(NAME), NAME, UID.
func (e env) users() []string {
	if e.euid < 0 {
		return nil
	}
	uid := strconv.Itoa(e.euid)
	name := uid
	if u, err := e.lookup(uid); err == nil && u.Username != "" && printable(u.Username) {
		name = u.Username
	}
	var out []string
	if e.sudo != "" && e.sudo != name && printable(e.sudo) {
		out = append(out, e.sudo+"("+name+")")
	}
	out = append(out, name)
	if name != uid {
		out = append(out, uid)
	}
	return out
}

func printable(s string) bool {
	for _, r := range s {
		if !store.Printable(r) {
			return false
		}
	}
	return true
}

// Parse reads a holder of the default form back: "USER@HOST:PID", or "HOST:PID" as an older once
// wrote it (user ""). HOST is what lies between the last '@' and the last ':' (a host name has
// neither; a user name from a directory may have an '@'). ok is false for any other holder — a
// name given with --holder, ONCE_HOLDER or --node, such as a pod name — which stands for itself.
// A launch of once drill ("drill-N/" before the default) keeps that prefix in user, or in host for
// the older form.
func Parse(holder string) (usr, host string, pid int, ok bool) {
	i := strings.LastIndexByte(holder, ':')
	if i < 0 {
		return "", "", 0, false
	}
	p, err := strconv.ParseUint(holder[i+1:], 10, 31)
	if err != nil {
		return "", "", 0, false
	}
	usr, host = "", holder[:i]
	if j := strings.LastIndexByte(host, '@'); j >= 0 {
		usr, host = host[:j], host[j+1:]
	}
	if host == "" {
		return "", "", 0, false
	}
	return usr, host, int(p), true
}
