package sqlite

import "testing"

// The BSDs and macOS name a filesystem's type; the network and FUSE ones are refused by doctor
// as Linux's magic numbers are.
func TestRemoteByName(t *testing.T) {
	pad := func(s string) []byte { b := make([]byte, 16); copy(b, s); return b }
	for _, c := range []struct{ in, remote, name string }{
		{"nfs", "NFS", "nfs"},
		{"smbfs", "SMB", "smbfs"},
		{"fusefs.sshfs", "FUSE (sshfs or similar)", "fusefs.sshfs"},
		{"macfuse", "FUSE (sshfs or similar)", "macfuse"},
		{"apfs", "", "apfs"},
		{"ufs", "", "ufs"},
		{"ffs", "", "ffs"},
		{"", "", ""},
	} {
		remote, name := remoteByName(pad(c.in))
		if remote != c.remote || name != c.name {
			t.Errorf("%q: got (%q, %q), want (%q, %q)", c.in, remote, name, c.remote, c.name)
		}
	}
	if remote, name := remoteByName([]byte("nfs4nfs4nfs4nfs4")); remote != "" || name != "nfs4nfs4nfs4nfs4" {
		t.Errorf("a name without a NUL: got (%q, %q)", remote, name)
	}
}

// The test's own temporary directory is on a local filesystem that filesystem can name.
func TestFilesystemOfATempDir(t *testing.T) {
	remote, kind, err := filesystem(t.TempDir())
	if err != nil || remote != "" || kind == "" {
		t.Fatalf("got (%q, %q, %v), want a local filesystem named", remote, kind, err)
	}
}
