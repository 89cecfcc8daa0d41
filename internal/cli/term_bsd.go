//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package cli

import "golang.org/x/sys/unix"

// ioctlGetTermios is the ioctl that reads a terminal's settings (isTerminal).
const ioctlGetTermios = unix.TIOCGETA
