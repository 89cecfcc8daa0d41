//go:build !linux

package sqlite

// bootClock reports no boot clock: the store's now is the wall clock.
func bootClock() (string, int64, bool) { return "", 0, false }
