//go:build !linux

package main

import (
	"os"
	"testing"
)

// openPTY opens a pseudo-terminal pair: Linux's way only (TIOCGPTN), so the test skips elsewhere.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Skip("pseudo-terminals are opened the Linux way only")
	return nil, nil
}
