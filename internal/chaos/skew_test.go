package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The skewed build shifts the wall clock by the offset it is given and leaves the monotonic clock
// (and so every measured duration) alone.
func TestBuildSkewed(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "now")
	if err := BuildSkewed(context.Background(), "./testdata/now", bin, dir); err != nil {
		t.Fatal(err)
	}
	for _, off := range []time.Duration{0, -SkewOffset, SkewOffset} {
		c := exec.Command(bin)
		c.Env = append(os.Environ(), skewEnv(off))
		before := time.Now().Unix()
		out, err := c.Output()
		if err != nil {
			t.Fatal(err)
		}
		var wall, slept int64
		if _, err := fmt.Sscan(string(out), &wall, &slept); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if d := wall - before - int64(off/time.Second); d < -1 || d > 5 {
			t.Errorf("offset %s: wall clock %d, want about %d", off, wall, before+int64(off/time.Second))
		}
		if slept < 200 || slept > 2000 {
			t.Errorf("offset %s: a 200 ms sleep measured %d ms by the monotonic clock", off, slept)
		}
	}
}
