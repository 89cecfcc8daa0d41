package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvWallOffset is read by a once binary built with BuildSkewed: whole seconds added to every
// wall-clock reading of time.Now (negative: behind).
const EnvWallOffset = "ONCE_CHAOS_WALL_OFFSET_SEC"

// SkewOffset is the clock offset the clock faults give one holder: an hour, as a host whose NTP
// is broken or whose time zone was mistaken for UTC would have; far more than any TTL.
const SkewOffset = time.Hour

// skewAnchor is the start of time.Now in the standard library; the patch adds the offset to the
// wall seconds right after the runtime reads them.
const skewAnchor = "func Now() Time {\n\tsec, nsec, mono := runtimeNow()\n"

const skewFile = `package time

import "syscall"

// fakeWallOffset is added to the wall seconds of every Now (chaos testing of once; see
// github.com/once-run/once/chaos.BuildSkewed). The monotonic reading is left alone, as a
// stepped or misset system clock leaves CLOCK_MONOTONIC alone.
var fakeWallOffset = loadFakeWallOffset()

func loadFakeWallOffset() int64 {
	v, _ := syscall.Getenv("` + EnvWallOffset + `")
	neg := len(v) > 0 && v[0] == '-'
	if len(v) > 0 && (v[0] == '-' || v[0] == '+') {
		v = v[1:]
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		return -n
	}
	return n
}
`

// BuildSkewed builds the Go package pkg into out with the standard library's time.Now patched
// (through go build -overlay, in dir) to add EnvWallOffset seconds to the wall clock. Go reads
// the clock through the vDSO, not libc, so libfaketime cannot shift a Go program's clock; this
// is the same fault without a hook in once: every wall-clock reading in the binary — the
// SQLite store's, the slot computation's, the ledger's timestamps — is shifted, and only them.
func BuildSkewed(ctx context.Context, pkg, out, dir string) error {
	gr, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("chaos: go env GOROOT: %w", err)
	}
	src := filepath.Join(strings.TrimSpace(string(gr)), "src", "time")
	b, err := os.ReadFile(filepath.Join(src, "time.go"))
	if err != nil {
		return fmt.Errorf("chaos: clock skew: %w", err)
	}
	if strings.Count(string(b), skewAnchor) != 1 {
		return fmt.Errorf("chaos: clock skew: time.Now in %s no longer starts as expected; update skewAnchor for this Go version", src)
	}
	patched := strings.Replace(string(b), skewAnchor, skewAnchor+"\tsec += fakeWallOffset\n", 1)
	files := map[string]string{filepath.Join(dir, "time.go"): patched, filepath.Join(dir, "zz_skew.go"): skewFile}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(src, "time.go"):    filepath.Join(dir, "time.go"),
		filepath.Join(src, "zz_skew.go"): filepath.Join(dir, "zz_skew.go"),
	}})
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, ov, 0o644); err != nil {
		return err
	}
	if o, err := exec.CommandContext(ctx, "go", "build", "-overlay", overlay, "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: go build -overlay (clock skew): %v\n%s", err, o)
	}
	return nil
}

// skewEnv is the environment entry that gives a skewed binary an offset of d.
func skewEnv(d time.Duration) string {
	return EnvWallOffset + "=" + strconv.FormatInt(int64(d/time.Second), 10)
}
