package sqlite

import "golang.org/x/sys/unix"

// filesystem: see fs_linux.go. NetBSD has statvfs(2) instead of statfs(2).
func filesystem(dir string) (remote, kind string, err error) {
	var st unix.Statvfs_t
	if err := unix.Statvfs(dir, &st); err != nil {
		return "", "", err
	}
	remote, kind = remoteByName(st.Fstypename[:])
	return remote, kind, nil
}
