package sqlstore

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestSplitStatements(t *testing.T) {
	src := "-- comment\nCREATE TABLE {p}a (\n  x int -- trailing\n);\n\n-- another\nCREATE INDEX i ON {p}a (x);\nSELECT 1"
	got := SplitStatements(src)
	if len(got) != 3 || !strings.HasPrefix(got[0], "CREATE TABLE {p}a (") || got[1] != "CREATE INDEX i ON {p}a (x)" || got[2] != "SELECT 1" {
		t.Fatalf("SplitStatements = %q", got)
	}
}

func TestLoadMigrations(t *testing.T) {
	fsys := fstest.MapFS{
		"m/002_b.sql":  {Data: []byte("SELECT 2;")},
		"m/001_a.sql":  {Data: []byte("SELECT 1;\nSELECT 11;")},
		"m/README.txt": {Data: []byte("ignored")},
	}
	ms, err := LoadMigrations(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 1 || len(ms[0].Statements) != 2 || ms[1].Name != "002_b.sql" {
		t.Fatalf("LoadMigrations = %+v, %v", ms, err)
	}
	fsys["m/004_gap.sql"] = &fstest.MapFile{Data: []byte("SELECT 4;")}
	if _, err := LoadMigrations(fsys, "m"); err == nil {
		t.Fatal("a gap in versions was accepted")
	}
}

func FuzzTablePrefix(f *testing.F) {
	for _, s := range []string{"", "blue", "t0a1b2", "Bad", "a-b", "_x", "x_", strings.Repeat("a", 33), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, err := TablePrefix(v)
		if err != nil {
			return
		}
		if v == "" {
			if p != DefaultPrefix {
				t.Fatalf("TablePrefix(\"\") = %q", p)
			}
			return
		}
		if p != v+"_" || len(p) > 33 {
			t.Fatalf("TablePrefix(%q) = %q", v, p)
		}
		for _, c := range p {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				t.Fatalf("TablePrefix(%q) = %q: not a plain identifier", v, p)
			}
		}
	})
}

func FuzzSplitStatements(f *testing.F) {
	f.Add("CREATE TABLE a (x int);\nSELECT 1;")
	f.Add("-- only a comment\n")
	f.Add(";\n;\n")
	f.Fuzz(func(t *testing.T, src string) {
		for _, s := range SplitStatements(src) {
			if strings.TrimSpace(s) == "" || strings.HasPrefix(strings.TrimSpace(s), "--") {
				t.Fatalf("SplitStatements(%q) gave %q", src, s)
			}
		}
	})
}
