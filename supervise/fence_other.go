//go:build unix && !linux

package supervise

import "time"

// Fence does nothing outside Linux: there is no shim to keep the fence (fence_linux.go).
func (p *Process) Fence(until time.Time) error { return nil }

// Fenced is false outside Linux.
func (p *Process) Fenced() bool { return false }
