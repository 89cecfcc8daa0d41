package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-run/once/store/sqlite"
)

// FileDSN and AbsoluteDSN give a DSN that ParseDSN reads back as the path they were given, whatever
// the path holds: '%' (also before hex digits), '$' (written %24, a raw one is refused), spaces, '#',
// '?', ';', '+', a non-ASCII name, a line break.
func TestDSNRoundTrip(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"once.db", "a%b.db", "a%24b.db", "a%2Fb.db", "100%.db", "a$b.db", "$HOME", "a b.db", " lead.db",
		"a#b.db", "a?b.db", "a?prefix=x.db", "a;b=c.db", "a+b.db", "é€.db", "a\nb.db", "a\tb.db",
		"a&b.db", "a:b.db", "a@b.db", "a'b.db", `a\b.db`, "%", "%%", "~x.db", "a=b?.db",
	} {
		for _, p := range []string{"/srv/" + name, "/srv/" + name + "/once.db", "/" + name} {
			dsn := sqlite.FileDSN(p)
			got, _, err := sqlite.ParseDSN(dsn)
			if err != nil || got != p {
				t.Errorf("FileDSN(%q) = %q reads as %q, %v", p, dsn, got, err)
			}
			q, _, err := sqlite.ParseDSN(dsn + "?busy_timeout=5s")
			if err != nil || q != p {
				t.Errorf("FileDSN(%q)+query reads as %q, %v", p, q, err)
			}
		}
		rel := sqlite.FileDSN("/x/" + name)
		rel = "sqlite:." + strings.TrimPrefix(rel, "sqlite:///x") // sqlite:./NAME, encoded
		p0, _, err := sqlite.ParseDSN(rel)
		if err != nil {
			if !strings.HasPrefix(name, "~") {
				t.Errorf("ParseDSN(%q): %v", rel, err)
			}
			continue
		}
		abs := sqlite.AbsoluteDSN(rel + "?busy_timeout=5s")
		p, _, err := sqlite.ParseDSN(abs)
		if err != nil || p != filepath.Join(wd, p0) {
			t.Errorf("AbsoluteDSN(%q) = %q reads as %q, %v; want %q", rel, abs, p, err, filepath.Join(wd, p0))
		}
	}
}

// The '$' refusal names a ledger at the path as written only when it is a SQLite file of this
// user's: a file anyone else put there (a directory '$USER' they made under /tmp), or one that is
// no ledger, is not offered as the DSN to go on with.
func TestDollarRefusalNamesOwnLedgerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "$USER")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "once.db")
	dsn := "sqlite://" + path
	named := func() bool {
		_, _, err := sqlite.ParseDSN(dsn)
		if err == nil {
			t.Fatalf("ParseDSN(%q) took a '$'", dsn)
		}
		return strings.Contains(err.Error(), "a ledger is at "+path)
	}
	if err := os.WriteFile(path, []byte("not a ledger, long enough"), 0o600); err != nil {
		t.Fatal(err)
	}
	if named() {
		t.Error("a file that is no SQLite database was named as a ledger")
	}
	os.Remove(path)
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !named() {
		t.Error("this user's ledger at the path as written was not named")
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if named() {
		t.Error("a ledger another user owns was named as the one to go on with")
	}
}

// The DSN the '$' refusal gives to go on with an older once's ledger keeps the DSN's parameters:
// without ?prefix= it named the same file's other tables, where today's slot was not done, and it
// ran again.
func TestDollarRefusalKeepsTheQuery(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.Mkdir("$HOME", 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(t.Context(), "$HOME/once.db", sqlite.Options{Prefix: "cron"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, _, err = sqlite.ParseDSN("sqlite:$HOME/once.db?prefix=cron&busy_timeout=5s")
	if err == nil {
		t.Fatal("a '$' taken")
	}
	msg := err.Error()
	i := strings.Index(msg, "write sqlite://")
	if i < 0 {
		t.Fatalf("no DSN given: %s", msg)
	}
	keep, _, _ := strings.Cut(msg[i+len("write "):], " ")
	p, o, err := sqlite.ParseDSN(keep)
	wd, _ := os.Getwd()
	if err != nil || p != filepath.Join(wd, "$HOME", "once.db") || o.Prefix != "cron" || o.BusyTimeout.String() != "5s" {
		t.Fatalf("the DSN given, %q, reads as %q %+v %v; want the ledger with prefix cron", keep, p, o, err)
	}
}
