package sqlite

import "golang.org/x/sys/unix"

// filesystem: see fs_linux.go.
func filesystem(dir string) (remote, kind string, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", "", err
	}
	remote, kind = remoteByName(st.F_fstypename[:])
	return remote, kind, nil
}
