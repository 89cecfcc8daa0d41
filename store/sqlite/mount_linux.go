package sqlite

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// superReadOnly says whether the file system that holds dir is itself read-only, not only the
// mount dir is reached through: a read-only bind mount of a file system that is written through
// another mount reports EROFS too, and a writer may go on there (a container's read-only view
// of the host's ledger). It is false when it cannot tell.
func superReadOnly(dir string) bool {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return false
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	id := strconv.FormatUint(stx.Mnt_id, 10)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, id+" ") {
			continue
		}
		// ID PARENT MAJ:MIN ROOT POINT MOUNT-OPTIONS [OPTIONAL…] - TYPE SOURCE SUPER-OPTIONS
		_, after, ok := strings.Cut(line, " - ")
		fields := strings.Fields(after)
		if !ok || len(fields) < 3 {
			return false
		}
		for _, o := range strings.Split(fields[2], ",") {
			if o == "ro" {
				return true
			}
		}
		return false
	}
	return false
}
