package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"testing"
)

// initLine is one line of GODEBUG=inittrace=1: "init PKG @T ms, C ms clock, B bytes, A allocs".
var initLine = regexp.MustCompile(`^init (\S+) @\S+ ms, (\S+) ms clock, (\d+) bytes, (\d+) allocs$`)

// The start cost every once run pays twice (once and its shim are the same binary), held to a
// budget by what does not move between runs: the bytes and allocations of package init. Clock
// time is logged, not checked (it moves with the machine's load); docs/benchmarks.md has it.
const (
	initPkgBytes  = 128 << 10 // one package's init (the largest: prometheus/procfs, ~94 KiB)
	initPkgAllocs = 1000
	initAllBytes  = 432 << 10 // every package's (~384 KiB; 457 KiB before the SQL stores' migrations were parsed on first use)
	initAllAllocs = 3000      // (~2,760; 2,990 before)
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
	var all pkg
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
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].bytes > pkgs[j].bytes })
	t.Logf("init: %d packages, %.2f ms clock, %d bytes, %d allocs; the largest:", len(pkgs), all.clock, all.bytes, all.allocs)
	for _, p := range pkgs[:5] {
		t.Logf("  %-55s %7d bytes %5d allocs %.3f ms", p.name, p.bytes, p.allocs, p.clock)
	}
}
