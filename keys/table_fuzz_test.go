package keys_test

import (
	"strings"
	"testing"

	"github.com/once-run/once/keys"
)

// FuzzValidateTable: a table name goes into SQL unquoted, so one accepted is 1 to 50 of
// [A-Za-z0-9_] not starting with a digit, optionally schema-qualified by one of the same form, and
// nothing else (no quote, semicolon, comment, space or second dot reaches a statement); the schema
// of every dialect then names it as given. A dialect name is read case-insensitively, and what it
// gives reads back as itself.
func FuzzValidateTable(f *testing.F) {
	for _, s := range []string{"once_keys", "s.t", "x;drop", "1abc", "a.b.c", "a-b", "", ".", "t.", "`t`", "\"t\"", "t--", "ｔ", strings.Repeat("a", 51)} {
		f.Add(s, "postgres")
	}
	f.Add("t", "PGX")
	f.Add("t", "sqlite3 ")
	f.Add("t", "mariadb")
	f.Fuzz(func(t *testing.T, name, dialect string) {
		if d, err := keys.ParseDialect(dialect); err == nil {
			if back, err := keys.ParseDialect(string(d)); err != nil || back != d {
				t.Fatalf("ParseDialect(%q) = %q, then %q, %v", dialect, d, back, err)
			}
		} else if !strings.Contains(err.Error(), "use postgres, mysql or sqlite") {
			t.Fatalf("ParseDialect(%q): %v", dialect, err)
		}
		err := keys.ValidateTable(name)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "keys: table name") {
				t.Fatalf("ValidateTable(%q): %v", name, err)
			}
			return
		}
		parts := strings.Split(name, ".")
		if len(parts) > 2 {
			t.Fatalf("ValidateTable(%q) accepted %d dots", name, len(parts)-1)
		}
		for _, p := range parts {
			if p == "" || len(p) > 50 || p[0] >= '0' && p[0] <= '9' || strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
				t.Fatalf("ValidateTable(%q) accepted the part %q", name, p)
			}
		}
		for _, d := range []keys.Dialect{keys.Postgres, keys.MySQL, keys.SQLite} {
			s, err := keys.Schema(d, name)
			if err != nil || !strings.Contains(s, "CREATE TABLE IF NOT EXISTS "+name+" ") || !strings.Contains(s, name+"_checkpoints") {
				t.Fatalf("Schema(%s, %q) = %q, %v", d, name, s, err)
			}
		}
	})
}
