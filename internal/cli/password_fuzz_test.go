package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-run/once/store/etcd"
	"github.com/once-run/once/store/mysql"
	"github.com/once-run/once/store/postgres"
	"github.com/once-run/once/store/redis"
	"github.com/once-run/once/store/zk"
)

// passwordOf are the DSNs a password file's password is put into, one per store that takes one,
// each with how its own parser reads the password back.
var passwordOf = []struct {
	dsn  string
	read func(dsn string) (string, error)
}{
	{"postgres://u@h:5432/db?sslmode=disable", func(d string) (string, error) {
		c, err := postgres.ParseDSN(d)
		if err != nil {
			return "", err
		}
		return c.Conn.Password, nil
	}},
	{"mysql://u@h:3306/db", func(d string) (string, error) {
		c, err := mysql.ParseDSN(d)
		if err != nil {
			return "", err
		}
		return c.Driver.Passwd, nil
	}},
	{"redis://u@h:6379/0", func(d string) (string, error) {
		c, err := redis.ParseDSN(d)
		if err != nil {
			return "", err
		}
		return c.Opts.Password, nil
	}},
	{"etcd://u@h:2379", func(d string) (string, error) {
		c, err := etcd.ParseDSN(d)
		return c.Password, err
	}},
	{"zk://u@h:2181", func(d string) (string, error) {
		c, err := zk.ParseDSN(d)
		return c.Password, err
	}},
}

// FuzzPasswordFile: a password file (--store-password-file, ONCE_STORE_PASSWORD_FILE; the token
// file of once serve follows the same rules) is read as its one line, a final newline (or CRLF)
// dropped and nothing else changed, or refused in one line. A password read is put into every
// store's DSN so that the store's own parser reads back exactly it: no character of it (@ : / ? #
// % + space, non-ASCII) is lost, changed, or taken for part of the DSN.
func FuzzPasswordFile(f *testing.F) {
	for _, s := range []string{"s3cr3t\n", "p@ss:w/rd?#&+ %\r\n", "x\ny\n", "", "\n", "a\x00b", "é€ 日本\n", "%41%", "pass word\t", "\r", "a\r\r\n", "a\n\n"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "pw")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		pw, err := readPasswordFile(path)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if want := strings.TrimSuffix(strings.TrimSuffix(content, "\n"), "\r"); pw != want || pw == "" {
			t.Fatalf("read %q from %q", pw, content)
		}
		a := &app{passwordFlag: path}
		for _, p := range passwordOf {
			full, err := a.withPassword(p.dsn)
			if err != nil {
				t.Fatalf("%s: %v", p.dsn, err)
			}
			got, err := p.read(full)
			if err != nil {
				if strings.Contains(err.Error(), pw) && len(pw) > 3 {
					t.Fatalf("%s: the error shows the password: %v", p.dsn, err)
				}
				t.Fatalf("%s with the password %q: %v", p.dsn, pw, err)
			}
			if got != pw {
				t.Fatalf("%s: the password %q reads back as %q", p.dsn, pw, got)
			}
		}
	})
}
