package sqlite

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// filesystem tells what holds dir: remote names a network or FUSE filesystem ("" for a local
// one), kind describes it for doctor.
func filesystem(dir string) (remote, kind string, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", "", err
	}
	return remoteMagic[int64(st.Type)], fmt.Sprintf("type %#x", st.Type), nil
}
