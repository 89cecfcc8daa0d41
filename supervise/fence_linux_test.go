package supervise

import (
	"testing"
	"time"
)

// TestFenceKillsTheRunWhenNotMoved: the shim kills the run at its fence when once does not move
// it (as a frozen once cannot), and leaves it alone while the fence keeps moving.
func TestFenceKillsTheRunWhenNotMoved(t *testing.T) {
	pr, err := Prepare(Config{Args: []string{"sh", "-c", "sleep 300 & wait"}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	p, err := pr.StartFenced(began.Add(300 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	took := time.Since(began)
	if err != nil || ex.Code != 137 || !p.Fenced() {
		t.Fatalf("fenced run: %+v %v, fenced %v", ex, err, p.Fenced())
	}
	if took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("the fence at 300ms killed the run after %s", took)
	}

	// A run that outlives its first fence, moved every 100 ms to 1 s ahead: a loaded machine (the
	// race detector, four test binaries at once) may hold the shim's start or a tick for a few
	// hundred milliseconds, which a margin of 200 ms did not survive.
	pr, err = Prepare(Config{Args: []string{"sh", "-c", "sleep 1.5"}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	p, err = pr.StartFenced(time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-p.Done():
			done = true
		case <-tick.C:
			if err := p.Fence(time.Now().Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ex, err := p.Wait(); err != nil || ex.Code != 0 || p.Fenced() {
		t.Fatalf("a run whose fence kept moving: %+v %v, fenced %v", ex, err, p.Fenced())
	}
	if err := p.Fence(time.Now()); err != nil {
		t.Fatalf("Fence after the run is over: %v, want nothing done", err)
	}
}
