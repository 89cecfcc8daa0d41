//go:build !linux && !darwin && !dragonfly && !freebsd && !openbsd && !netbsd

package sqlite

import "errors"

// filesystem: see fs_linux.go. Elsewhere doctor says it cannot tell.
func filesystem(string) (remote, kind string, err error) {
	return "", "", errors.ErrUnsupported
}
