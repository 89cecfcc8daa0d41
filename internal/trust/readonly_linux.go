package trust

import "golang.org/x/sys/unix"

// readOnly reports whether path is on a file system mounted read-only: nobody can write it
// through this mount, whatever its mode says.
func readOnly(path string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(path, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0
}
