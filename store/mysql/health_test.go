package mysql

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// adminDB connects as root over the private test server's socket (unix_socket authentication, as
// scripts/testenv starts it); the user in ONCE_TEST_MYSQL cannot change global settings.
func adminDB(t *testing.T) *sql.DB {
	t.Helper()
	serverDSN(t)
	ctl := os.Getenv("ONCE_TEST_MYSQL_CTL")
	if ctl == "" {
		t.Skip("ONCE_TEST_MYSQL_CTL is not set (a server of your own): changing global settings needs the private server's root")
	}
	db, err := sql.Open("mysql", "root@unix("+filepath.Join(filepath.Dir(ctl), "mysqld.sock")+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(ctxT(t, 5*time.Second)); err != nil {
		t.Skipf("cannot connect as root over the server's socket: %v", err)
	}
	return db
}

// setGlobal turns a global setting to value for the rest of the test and back in t.Cleanup.
func setGlobal(t *testing.T, db *sql.DB, name, value string) {
	t.Helper()
	var old string
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SET GLOBAL " + name + " = " + value); err != nil {
		t.Fatalf("SET GLOBAL %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "SET GLOBAL "+name+" = "+old); err != nil {
			t.Errorf("restore %s = %s: %v", name, old, err)
		}
	})
}

func durabilityFindings(t *testing.T, s *Store) []store.Finding {
	t.Helper()
	fs, err := s.Inspect(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestInspectDurability: the real server's safe settings are one ok finding; each unsafe one, set at
// runtime, is a warning naming it. sync_binlog matters only with the binary log on (log_bin cannot be
// changed at runtime: with it off, sync_binlog = 0 is no finding; TestDurabilityGrades covers it on).
func TestInspectDurability(t *testing.T) {
	s, err := Open(ctxT(t, 10*time.Second), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs := durabilityFindings(t, s)
	if len(fs) != 1 || fs[0].Level != store.LevelOK || !strings.Contains(fs[0].Message, "innodb_flush_log_at_trx_commit 1") {
		t.Fatalf("defaults: %+v, want one ok finding", fs)
	}
	db := adminDB(t)
	var logBin bool
	if err := db.QueryRow("SELECT @@GLOBAL.log_bin").Scan(&logBin); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0", "2"} {
		t.Run("innodb_flush_log_at_trx_commit="+v, func(t *testing.T) {
			setGlobal(t, db, "innodb_flush_log_at_trx_commit", v)
			fs := durabilityFindings(t, s)
			if len(fs) != 1 || fs[0].Level != store.LevelWarn || !strings.Contains(fs[0].Message, "innodb_flush_log_at_trx_commit is "+v) {
				t.Fatalf("%+v, want one warning naming it", fs)
			}
		})
	}
	t.Run("sync_binlog=0", func(t *testing.T) {
		setGlobal(t, db, "sync_binlog", "0")
		fs := durabilityFindings(t, s)
		warned := len(fs) == 1 && fs[0].Level == store.LevelWarn && strings.Contains(fs[0].Message, "sync_binlog is 0")
		if warned != logBin || len(fs) != 1 {
			t.Fatalf("log_bin %v: %+v", logBin, fs)
		}
	})
}

// TestDurabilityGrades: each unsafe setting alone is one warning; sync_binlog counts with the binary
// log on only.
func TestDurabilityGrades(t *testing.T) {
	for _, c := range []struct {
		flush, sync string
		logBin      bool
		warns       int
	}{
		{"1", "1", true, 0}, {"1", "0", false, 0}, {"1", "0", true, 1}, {"1", "100", true, 1},
		{"2", "1", true, 1}, {"0", "0", true, 2},
	} {
		fs := durability("h:1/db", c.flush, c.sync, c.logBin)
		warns := 0
		for _, f := range fs {
			if f.Level == store.LevelWarn {
				warns++
			}
		}
		if warns != c.warns || (c.warns == 0 && (len(fs) != 1 || fs[0].Level != store.LevelOK)) {
			t.Errorf("%+v: %+v", c, fs)
		}
	}
}
