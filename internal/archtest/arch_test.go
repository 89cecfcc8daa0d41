// Package archtest checks the shape the architecture page (docs/architecture.md) promises: what each
// package may import, and the size of files and functions. It has tests only.
package archtest

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/once-run/once"

// Limits from issue 13: no non-test file over 600 lines; no function over 80 lines unless its doc
// comment gives the reason in a sentence starting "Long because".
const (
	maxFileLines = 600
	maxFuncLines = 80
	longReason   = "Long because"
)

// imports lists every package of the module with the module's and third parties' packages it imports
// (tests excluded): go list, as the build sees them.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if pkg == "" {
			pkg = "once"
		}
		m[pkg] = f[1:]
	}
	if len(m) < 20 || m["cmd/once"] == nil {
		t.Fatalf("go list found %d packages: %s", len(m), out)
	}
	return m
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func local(imp string) (string, bool) {
	if imp == module {
		return "once", true
	}
	if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
		return rest, true
	}
	return "", false
}

// testOnly are the packages only tests import: they may import anything, and nothing else imports them.
var testOnly = map[string]bool{"store/storetest": true, "internal/chaos": true, "internal/sqlstore/sqltest": true, "internal/keystest": true, "internal/testfs": true}

var backends = []string{"store/sqlite", "store/postgres", "store/mysql", "store/redis", "store/etcd", "store/zk"}

func isBackend(p string) bool {
	for _, b := range backends {
		if p == b {
			return true
		}
	}
	return false
}

// TestImportRules: arrows point down (cli → job → once → lease/store ← backends).
func TestImportRules(t *testing.T) {
	for pkg, imps := range imports(t) {
		if testOnly[pkg] {
			continue
		}
		for _, imp := range imps {
			dep, ok := local(imp)
			third := !ok
			if third && (strings.HasPrefix(imp, "github.com/spf13/cobra") || strings.HasPrefix(imp, "github.com/spf13/pflag")) &&
				pkg != "internal/cli" {
				t.Errorf("%s imports %s: only internal/cli parses flags", pkg, imp)
			}
			if third && (strings.HasPrefix(imp, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(imp, "go.opentelemetry.io/otel/exporters") ||
				strings.HasPrefix(imp, "go.opentelemetry.io/proto") || strings.HasPrefix(imp, "google.golang.org/grpc")) && pkg != "internal/telemetry" {
				t.Errorf("%s imports %s: the library uses OpenTelemetry's API only (a TracerProvider is given to it); the SDK is internal/telemetry's", pkg, imp)
			}
			if third && strings.HasPrefix(imp, "github.com/prometheus/client_golang") {
				t.Errorf("%s imports %s: its package init runs in every once process, once run's included (internal/metrics writes the text format itself)", pkg, imp)
			}
			std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
			if (pkg == "cmd/once-shim" || pkg == "supervise") && !std && (third && !strings.HasPrefix(imp, "golang.org/x/sys/") || !third && dep != "supervise") {
				t.Errorf("%s imports %s: the shim starts on every run, and imports nothing but supervise and golang.org/x/sys", pkg, imp)
			}
			if third {
				continue
			}
			switch {
			case dep == "internal/cli" && pkg != "cmd/once":
				t.Errorf("%s imports internal/cli: only cmd/once may", pkg)
			case dep == "internal/telemetry" && pkg != "internal/cli":
				t.Errorf("%s imports internal/telemetry: only internal/cli sets up OpenTelemetry's SDK", pkg)
			case dep == "job" && pkg != "internal/cli" && pkg != "scheduler":
				t.Errorf("%s imports job: in this module only internal/cli and scheduler run commands under the guard", pkg)
			case dep == "scheduler" && pkg != "internal/cli" && pkg != "internal/web":
				t.Errorf("%s imports scheduler: in this module only internal/cli runs the daemon (and internal/web reads its jobs)", pkg)
			case pkg == "internal/web" && (dep == "job" || dep == "supervise" || dep == "lease" || dep == "flock" || dep == "internal/cli"):
				t.Errorf("internal/web imports %s: the web server reads and decides through the store, it runs nothing", dep)
			case pkg == "scheduler" && (dep == "supervise" || dep == "flock" || dep == "lease"):
				t.Errorf("scheduler imports %s: it runs commands through job and the guard through once", dep)
			case testOnly[dep]:
				t.Errorf("%s imports %s, which is for tests only", pkg, dep)
			case isBackend(pkg) && isBackend(dep):
				t.Errorf("backend %s imports backend %s: no backend imports another", pkg, dep)
			case isBackend(dep) && !(pkg == "internal/cli" || pkg == "cmd/once" || strings.HasPrefix(pkg, "examples/") || strings.HasPrefix(pkg, "bench/")):
				t.Errorf("%s imports backend %s: the library knows stores through package store only", pkg, dep)
			case (pkg == "store" || isBackend(pkg) || pkg == "internal/sqlstore" || pkg == "internal/kvstore") &&
				(dep == "once" || dep == "lease" || dep == "supervise" || dep == "slot" || dep == "flock"):
				t.Errorf("%s imports %s: stores know nothing of the guard", pkg, dep)
			case pkg == "jobfile" && dep != "once" && dep != "slot" && dep != "store":
				t.Errorf("jobfile imports %s: it reads jobs files with once, slot and store only", dep)
			case pkg == "internal/metrics" && (dep == "once" || dep == "job" || dep == "scheduler" || dep == "lease" || dep == "supervise"):
				t.Errorf("internal/metrics imports %s: it reads the store, and a daemon's counters through metrics.FleetStats", dep)
			case pkg == "once" && (dep == "supervise" || dep == "notify"):
				t.Errorf("once imports %s: the guard knows nothing of processes (package job runs commands)", dep)
			}
		}
	}
}

// TestSizes: files and functions small enough to read; a long function says why.
func TestSizes(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(root(t), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || strings.HasPrefix(n, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(t), p)
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s: %d lines, want at most %d: split it by concept", rel, n, maxFileLines)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines && !strings.Contains(fd.Doc.Text(), longReason) {
				t.Errorf("%s: %s is %d lines, want at most %d, or a sentence %q in its doc comment",
					rel, fd.Name.Name, n, maxFuncLines, longReason+" …")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
