package who

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

func passwd(m map[string]string) func(string) (*user.User, error) {
	return func(uid string) (*user.User, error) {
		if n, ok := m[uid]; ok {
			return &user.User{Uid: uid, Username: n}, nil
		}
		return nil, user.UnknownUserIdError(0)
	}
}

var db = passwd(map[string]string{"0": "root", "1000": "alice", "1001": "bob", "70": "postgres", "66": "bad\nname"})

func TestHolder(t *testing.T) {
	for _, c := range []struct {
		euid       int
		sudo, want string
	}{
		{1000, "", "alice@web1:4121"},
		{0, "", "root@web1:4121"},                       // root's crontab
		{0, "alice", "alice(root)@web1:4121"},           // sudo once run …
		{70, "alice", "alice(postgres)@web1:4121"},      // sudo -u postgres once run …
		{1000, "alice", "alice@web1:4121"},              // sudo -u alice by alice
		{54321, "", "54321@web1:4121"},                  // a uid without a name (a container's --user)
		{54321, "alice", "alice(54321)@web1:4121"},      // sudo to it
		{66, "", "66@web1:4121"},                        // a name that cannot be stored: its number
		{0, "eve\x1b[2J", "root@web1:4121"},             // a SUDO_USER that cannot be stored is left out
		{0, strings.Repeat("a", 300), "root@web1:4121"}, // one that does not fit too
		{-1, "alice", "web1:4121"},                      // no uid (Windows): the older form
	} {
		e := env{euid: c.euid, lookup: db, sudo: c.sudo, host: "web1", pid: 4121}
		if got := e.holder(store.MaxHolderLen); got != c.want {
			t.Errorf("euid %d SUDO_USER %q: holder %q, want %q", c.euid, c.sudo, got, c.want)
		}
	}
}

// A default holder always passes the checks of an explicit one: a long host name loses the user
// before the holder is refused (a host that worked with an older once must not stop working).
func TestHolderFits(t *testing.T) {
	long := strings.Repeat("h", 240)
	for _, c := range []struct {
		host, sudo, want string
	}{
		{long, "", "alice@" + long + ":4121"},
		{long, "alice", "bob@" + long + ":4121"},            // "alice(bob)@" does not fit
		{long + "hhhhh", "", "1000@" + long + "hhhhh:4121"}, // "alice@" does not: the uid's number
		{long + "hhhhhhhhhh", "", long + "hhhhhhhhhh:4121"}, // nor does that: the older form
	} {
		e := env{euid: 1001, lookup: db, sudo: c.sudo, host: c.host, pid: 4121}
		if c.sudo == "" {
			e.euid = 1000
		}
		got := e.holder(store.MaxHolderLen)
		if got != c.want {
			t.Errorf("host of %d bytes, SUDO_USER %q: holder %q, want %q", len(c.host), c.sudo, got, c.want)
		}
		if err := store.CheckName("holder", got, store.MaxHolderLen); err != nil {
			t.Error(err)
		}
	}
}

// A host name the kernel took but the store would refuse (any 64 bytes: `hostname $'web\x01'`)
// is escaped byte by byte, so the default holder still works; a valid one is unchanged.
func TestEscapeHost(t *testing.T) {
	for in, want := range map[string]string{
		"web1":                     "web1",
		"bücher.example":           "bücher.example",
		"web\x01":                  "web%01",
		"a\tb\nc":                  "a%09b%0Ac",
		"bad\xff\xfeutf8":          "bad%FF%FEutf8",
		"\u200bzero":               "%E2%80%8Bzero", // a format character, invisible
		"\x7f\u0085":               "%7F%C2%85",
		strings.Repeat("\x01", 64): strings.Repeat("%01", 64),
	} {
		got := escapeHost(in)
		if got != want {
			t.Errorf("escapeHost(%q) = %q, want %q", in, got, want)
		}
		e := env{euid: 1000, lookup: db, host: got, pid: 4194304}
		h := e.holder(store.MaxHolderLen)
		if err := store.CheckName("holder", h, store.MaxHolderLen); err != nil || h != "alice@"+want+":4194304" {
			t.Errorf("holder on host %q: %q, %v", in, h, err)
		}
		if _, host, _, ok := Parse(h); !ok || host != want {
			t.Errorf("Parse(%q) = host %q, %v; want %q", h, host, ok, want)
		}
	}
}

func FuzzEscapeHost(f *testing.F) {
	for _, s := range []string{"web1", "web\x01", "bad\xff", "\u200b", "a%b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if len(h) > 64 { // the kernel's limit
			h = h[:64]
		}
		got := escapeHost(h)
		if err := store.CheckName("holder", got, store.MaxHolderLen); h != "" && err != nil {
			t.Fatalf("escapeHost(%q) = %q: %v", h, got, err)
		}
		if store.CheckName("holder", h, store.MaxHolderLen) == nil && got != h {
			t.Fatalf("escapeHost(%q) = %q: a valid name changed", h, got)
		}
	})
}

func TestDecider(t *testing.T) {
	e := env{euid: 0, lookup: db, sudo: "alice", host: "web1", pid: 1}
	if got := e.decider(); got != "alice(root)@web1" {
		t.Errorf("decider %q", got)
	}
	e = env{euid: -1, lookup: db, host: "web1"}
	if got := e.decider(); got != "unknown@web1" {
		t.Errorf("decider without a uid %q", got)
	}
}

// This process's own: the name of its effective uid (or the number), this host, this pid.
func TestHolderOfThisProcess(t *testing.T) {
	h := Holder()
	usr, host, pid, ok := Parse(h)
	name := strconv.Itoa(os.Geteuid())
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	if sudo := os.Getenv("SUDO_USER"); sudo != "" && sudo != name {
		name = sudo + "(" + name + ")"
	}
	hn := Host()
	if !ok || usr != name || host != hn || pid != os.Getpid() {
		t.Errorf("Holder() = %q: parsed %q %q %d %v, want user %q host %q pid %d", h, usr, host, pid, ok, name, hn, os.Getpid())
	}
	if d := Decider(); d != name+"@"+hn {
		t.Errorf("Decider() = %q, want %q", d, name+"@"+hn)
	}
}

func TestParse(t *testing.T) {
	type parts struct {
		usr, host string
		pid       int
		ok        bool
	}
	for in, want := range map[string]parts{
		"web1:4121":              {"", "web1", 4121, true}, // an older once's
		"alice@web1:4121":        {"alice", "web1", 4121, true},
		"alice(root)@web1:4121":  {"alice(root)", "web1", 4121, true},
		"54321@web1:7":           {"54321", "web1", 7, true},
		"alice@corp.example@h:9": {"alice@corp.example", "h", 9, true}, // a directory's user name
		"drill-2/alice@web1:3":   {"drill-2/alice", "web1", 3, true},
		"drill-2/web1:3":         {"", "drill-2/web1", 3, true},
		"a:b:12":                 {"", "a:b", 12, true},
		"sync-orders-2912-x7k":   {},
		"alice@web1":             {},
		"web1:":                  {},
		":12":                    {},
		"alice@:12":              {},
		"h:99999999999":          {},
		"h:-1":                   {},
		"h:+1":                   {},
		"pod@ns:port":            {},
	} {
		u, h, p, ok := Parse(in)
		if got := (parts{u, h, p, ok}); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"web1:4121", "alice(root)@web1:4121", "a@b@c:1", ":1", "@:", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, h, p, ok := Parse(s)
		if !ok {
			if u != "" || h != "" || p != 0 {
				t.Fatalf("Parse(%q) not ok but gave %q %q %d", s, u, h, p)
			}
			return
		}
		i := strings.LastIndexByte(s, ':')
		rest := s[:i]
		if n, err := strconv.ParseUint(s[i+1:], 10, 64); err != nil || int(n) != p {
			t.Fatalf("Parse(%q): pid %d is not its tail", s, p)
		}
		if h == "" || strings.ContainsAny(h, "@") || (rest != h && rest != u+"@"+h) {
			t.Fatalf("Parse(%q) = %q %q %d", s, u, h, p)
		}
	})
}

// The holder a process builds reads back to its parts, whatever the user and host.
func FuzzHolderRoundTrip(f *testing.F) {
	f.Add("alice", "root", "web1", 4121)
	f.Add("", "a@b", "h", 1)
	f.Fuzz(func(t *testing.T, sudo, name, host string, pid int) {
		if host == "" || strings.ContainsAny(host, "@:") || pid < 0 || pid > 1<<30 {
			return // no host name has them
		}
		e := env{euid: 5, lookup: passwd(map[string]string{"5": name}), sudo: sudo, host: host, pid: pid}
		h := e.holder(store.MaxHolderLen)
		if store.CheckName("holder", h, store.MaxHolderLen) != nil {
			if store.CheckName("holder", host+":1", store.MaxHolderLen) == nil && len(host) < 200 {
				t.Fatalf("holder %q is refused", h)
			}
			return
		}
		_, gh, gp, ok := Parse(h)
		if !ok || gh != host || gp != pid {
			t.Fatalf("holder %q parsed as host %q pid %d %v, want %q %d", h, gh, gp, ok, host, pid)
		}
	})
}

// A caller that adds to the holder (once drill's "drill-N/") gets one that leaves it room.
func TestHolderWithin(t *testing.T) {
	long := strings.Repeat("h", 240)
	e := env{euid: 1000, lookup: db, host: long, pid: 4121}
	if got, want := e.holder(store.MaxHolderLen), "alice@"+long+":4121"; got != want {
		t.Errorf("holder %q, want %q", got, want)
	}
	if got, want := e.holder(store.MaxHolderLen-len("drill-3/")), long+":4121"; got != want {
		t.Errorf("holder within %d: %q, want %q", store.MaxHolderLen-8, got, want)
	}
	if h := HolderWithin(store.MaxHolderLen - 8); store.CheckName("holder", "drill-3/"+h, store.MaxHolderLen) != nil || h != Holder() {
		t.Errorf("HolderWithin: %q (Holder %q)", h, Holder())
	}
}

// A uid without a name is looked up once per process, as a uid with one is: a library's caller
// in a container (--user 54321) starts many runs, each of which read /etc/passwd again.
func TestLookupKeepsAMiss(t *testing.T) {
	const uid = "2099999937" // below 2^31: a 32-bit build's user.LookupId refuses more before reading
	if _, err := user.LookupId(uid); err == nil {
		t.Skipf("uid %s has a name here", uid)
	}
	if _, err := lookupID(uid); err == nil {
		t.Fatal("a uid without a name was found")
	}
	if n, ok := names.Load(uid); !ok || n != "" {
		t.Fatalf("the miss is not kept: %v %v", n, ok)
	}
	if _, err := lookupID(uid); err == nil {
		t.Fatal("a kept miss was found")
	}
	me := strconv.Itoa(os.Geteuid())
	u, err := user.LookupId(me)
	if err != nil {
		t.Skip("this uid has no name")
	}
	for range 2 {
		if got, err := lookupID(me); err != nil || got.Username != u.Username {
			t.Fatalf("lookupID(%s) = %v %v, want %q", me, got, err, u.Username)
		}
	}
}
