package postgres

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/once-run/once/store"
)

// adminDB connects as the superuser "postgres" over the private test server's socket (trust auth,
// scripts/testenv/postgres.sh); the role in ONCE_TEST_POSTGRES cannot change server settings.
func adminDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := serverDSN(t)
	ctl := os.Getenv("ONCE_TEST_POSTGRES_CTL")
	if ctl == "" {
		t.Skip("ONCE_TEST_POSTGRES_CTL is not set (a server of your own): changing server settings needs the private server's superuser")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", "host="+filepath.Join(filepath.Dir(ctl), "sock")+" port="+u.Port()+" user=postgres dbname=postgres sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// alterSystem turns a server setting to value for the rest of the test (ALTER SYSTEM and a reload)
// and back to what the configuration says in t.Cleanup.
func alterSystem(t *testing.T, db *sql.DB, name, value string) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	reset := func() {
		if _, err := db.ExecContext(context.Background(), "ALTER SYSTEM RESET "+name); err != nil {
			t.Errorf("restore %s: %v", name, err)
		}
		if _, err := db.ExecContext(context.Background(), "SELECT pg_reload_conf()"); err != nil {
			t.Errorf("reload after restoring %s: %v", name, err)
		}
	}
	if _, err := db.ExecContext(ctx, "ALTER SYSTEM SET "+name+" = '"+value+"'"); err != nil {
		t.Fatalf("ALTER SYSTEM SET %s: %v", name, err)
	}
	t.Cleanup(reset)
	if _, err := db.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
}

// inspectUntil calls Inspect until a durability finding contains want (a reload reaches each
// session at its next statement, not at once), and returns it.
func inspectUntil(t *testing.T, s *Store, want string) store.Finding {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	var last []store.Finding
	for ctx.Err() == nil {
		fs, err := s.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Check == "durability" && strings.Contains(f.Message, want) {
				return f
			}
		}
		last = fs
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no durability finding with %q; last: %+v", want, last)
	return store.Finding{}
}

func openT(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(ctxT(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestInspectDurability: the real server's safe defaults are one ok finding; each unsafe setting,
// turned on at runtime, is a finding of its own.
func TestInspectDurability(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	t.Run("defaults", func(t *testing.T) {
		f := inspectUntil(t, openT(t, dsn), "fsync on, synchronous_commit on, full_page_writes on")
		if f.Level != store.LevelOK {
			t.Fatalf("%+v, want ok", f)
		}
	})
	t.Run("synchronous_commit in the DSN", func(t *testing.T) {
		f := inspectUntil(t, openT(t, dsn+"&options=-c%20synchronous_commit%3Doff"), "synchronous_commit is off")
		if f.Level != store.LevelWarn {
			t.Fatalf("%+v, want warn", f)
		}
	})
	for _, c := range []struct {
		name  string
		level store.Level
	}{{"fsync", store.LevelFail}, {"full_page_writes", store.LevelWarn}, {"synchronous_commit", store.LevelWarn}} {
		t.Run(c.name, func(t *testing.T) {
			db := adminDB(t)
			var source string
			if err := db.QueryRow("SELECT source FROM pg_settings WHERE name = $1", c.name).Scan(&source); err != nil {
				t.Fatal(err)
			}
			if source == "command line" {
				// ALTER SYSTEM cannot override it (scripts/testenv starts the server with -c fsync=on);
				// TestDurabilityGrades covers the grading.
				t.Skipf("%s is set on the server's command line", c.name)
			}
			s := openT(t, dsn)
			alterSystem(t, db, c.name, "off")
			f := inspectUntil(t, s, c.name+" is off")
			if f.Level != c.level {
				t.Fatalf("%+v, want %s", f, c.level)
			}
		})
	}
}

// TestDurabilityGrades: each unsafe setting alone is one finding at its level.
func TestDurabilityGrades(t *testing.T) {
	safe := map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
	for _, c := range []struct {
		name, value string
		level       store.Level
	}{{"fsync", "off", store.LevelFail}, {"synchronous_commit", "off", store.LevelWarn}, {"full_page_writes", "off", store.LevelWarn},
		{"synchronous_commit", "local", store.LevelOK}, {"synchronous_commit", "remote_write", store.LevelOK}} {
		m := map[string]string{}
		for k, v := range safe {
			m[k] = v
		}
		m[c.name] = c.value
		fs := durability("h:1/db", m)
		if len(fs) != 1 || fs[0].Level != c.level || !strings.Contains(fs[0].Message, c.name) {
			t.Errorf("%s=%s: %+v, want one %s finding naming it", c.name, c.value, fs, c.level)
		}
	}
	if fs := durability("h:1/db", map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}); len(fs) != 3 {
		t.Errorf("all off: %d findings, want 3", len(fs))
	}
}
