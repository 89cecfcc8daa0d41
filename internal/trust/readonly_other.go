//go:build unix && !linux

package trust

// readOnly is false where once does not read the mount's flags: the modes alone decide.
func readOnly(string) bool { return false }
