package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// initLine is one line of GODEBUG=inittrace=1: "init PKG @T ms, C ms clock, B bytes, A allocs".
var initLine = regexp.MustCompile(`^init (\S+) @\S+ ms, (\S+) ms clock, (\d+) bytes, (\d+) allocs$`)

// The start cost every once run pays (twice without once-shim beside it: the shim is then once
// re-executed), held to a budget by what does not move between runs: the bytes and allocations
// of package init. Clock time is logged, not checked (it moves with the machine's load);
// docs/benchmarks.md has it.
const (
	initPkgBytes  = 48 << 10 // one package's init (the largest: encoding/xml, ~18 KiB; prometheus/procfs took ~94 KiB before it went)
	initPkgAllocs = 300
	initAllBytes  = 224 << 10 // every package's (~174 KiB; ~398 KiB with the Prometheus client, 457 KiB before the SQL stores' migrations were parsed on first use)
	initAllAllocs = 1600      // (~1,250; 2,910 with the Prometheus client)
	// OpenTelemetry's packages (go.opentelemetry.io/...), linked for the spans a run sends when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, and initialised at every start whether it is or not:
	// ~11-14 KiB in ~135-150 allocations (the SDK's resource and self-observability, the API's globals).
	// The OTLP messages are written without the generated types (internal/telemetry) to keep
	// their descriptors (~20 KiB, 67 allocations) out of this.
	initOtelBytes  = 16 << 10
	initOtelAllocs = 200
)

// TestInitCost runs `once version` (the binary built without -race) under GODEBUG=inittrace=1
// and fails when one package's init, or all of them, allocate more than the budget.
func TestInitCost(t *testing.T) {
	t.Parallel()
	c := exec.Command(volumeBin, "version")
	c.Env = append(newEnv(t).vars, "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("once version: %v %s", err, stderr.String())
	}
	type pkg struct {
		name          string
		clock         float64
		bytes, allocs int64
	}
	var pkgs []pkg
	var all, otel pkg
	for _, l := range bytes.Split(stderr.Bytes(), []byte("\n")) {
		m := initLine.FindSubmatch(l)
		if m == nil {
			continue
		}
		p := pkg{name: string(m[1])}
		p.clock, _ = strconv.ParseFloat(string(m[2]), 64)
		p.bytes, _ = strconv.ParseInt(string(m[3]), 10, 64)
		p.allocs, _ = strconv.ParseInt(string(m[4]), 10, 64)
		pkgs = append(pkgs, p)
		all.clock, all.bytes, all.allocs = all.clock+p.clock, all.bytes+p.bytes, all.allocs+p.allocs
		if strings.HasPrefix(p.name, "go.opentelemetry.io/") {
			otel.clock, otel.bytes, otel.allocs = otel.clock+p.clock, otel.bytes+p.bytes, otel.allocs+p.allocs
		}
		if p.bytes > initPkgBytes || p.allocs > initPkgAllocs {
			t.Errorf("init of %s: %d bytes in %d allocs, budget %d bytes and %d allocs a package: make it lazy (a sync.OnceValue) or say why here",
				p.name, p.bytes, p.allocs, initPkgBytes, initPkgAllocs)
		}
	}
	if len(pkgs) < 50 {
		t.Fatalf("GODEBUG=inittrace=1 printed %d init lines: %.500s", len(pkgs), stderr.String())
	}
	if all.bytes > initAllBytes || all.allocs > initAllAllocs {
		t.Errorf("init of all %d packages: %d bytes in %d allocs, budget %d bytes and %d allocs", len(pkgs), all.bytes, all.allocs, initAllBytes, initAllAllocs)
	}
	if otel.bytes > initOtelBytes || otel.allocs > initOtelAllocs {
		t.Errorf("init of OpenTelemetry's packages: %d bytes in %d allocs, budget %d bytes and %d allocs: tracing must cost nothing when it is off",
			otel.bytes, otel.allocs, initOtelBytes, initOtelAllocs)
	}
	t.Logf("init of OpenTelemetry's packages: %.2f ms clock, %d bytes, %d allocs", otel.clock, otel.bytes, otel.allocs)
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].bytes > pkgs[j].bytes })
	t.Logf("init: %d packages, %.2f ms clock, %d bytes, %d allocs; the largest:", len(pkgs), all.clock, all.bytes, all.allocs)
	for _, p := range pkgs[:5] {
		t.Logf("  %-55s %7d bytes %5d allocs %.3f ms", p.name, p.bytes, p.allocs, p.clock)
	}
}
