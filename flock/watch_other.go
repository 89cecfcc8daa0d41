//go:build !linux

package flock

import (
	"context"
	"time"
)

// closeWatch is Linux's inotify watch of a lock file; elsewhere there is none, and a waiter
// backs off and retries instead (see Acquire).
type closeWatch struct{}

// watchClose returns nil: no inotify here.
func watchClose(string) *closeWatch { return nil }

func (*closeWatch) wait(context.Context, time.Time) bool { return false }

func (*closeWatch) close() {}
