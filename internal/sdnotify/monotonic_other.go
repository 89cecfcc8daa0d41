//go:build !linux

package sdnotify

// monotonicUsec: systemd runs on Linux only; elsewhere Reloading sends no timestamp.
func monotonicUsec() (int64, bool) { return 0, false }
