package sqlite

import "strings"

// remoteMagic names the network and FUSE filesystems by Linux's statfs(2) f_type: SQLite's locks
// cannot be trusted on them.
var remoteMagic = map[int64]string{
	0x6969:     "NFS",
	0x517B:     "SMB",
	0xFE534D42: "SMB2",
	0xFF534D42: "CIFS",
	0x65735546: "FUSE (sshfs or similar)",
	0x01021997: "9P (v9fs)",
	0x00C36400: "CephFS",
	0x5346414F: "AFS",
	0x013111A8: "IBRIX",
	0x47504653: "GPFS",
	0x0BD00BD0: "Lustre",
}

// remoteNames names the same by the BSDs' and macOS's f_fstypename.
var remoteNames = map[string]string{
	"nfs":     "NFS",
	"nfs4":    "NFS",
	"smbfs":   "SMB",
	"cifs":    "CIFS",
	"afpfs":   "AFP",
	"webdav":  "WebDAV",
	"9p":      "9P",
	"afs":     "AFS",
	"ceph":    "CephFS",
	"fuse":    "FUSE (sshfs or similar)",
	"fusefs":  "FUSE (sshfs or similar)",
	"macfuse": "FUSE (sshfs or similar)",
	"osxfuse": "FUSE (sshfs or similar)",
	"puffs":   "FUSE (sshfs or similar)", // NetBSD's userspace filesystems
	"perfuse": "FUSE (sshfs or similar)",
}

// remoteByName is the network filesystem f_fstypename (NUL-padded) names, if it is one, and the
// name itself. A FUSE filesystem's type may carry its kind after a dot ("fusefs.sshfs").
func remoteByName(fstypename []byte) (remote, name string) {
	name = string(fstypename)
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	base, _, _ := strings.Cut(strings.ToLower(name), ".")
	return remoteNames[base], name
}
