package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// maxPasswordFile bounds what is read from a password file: a password, not a document.
const maxPasswordFile = 4096

// passwordFile resolves --store-password-file, else $ONCE_STORE_PASSWORD_FILE, to an absolute path
// (the job gets it in its environment and may change directory), or "" when neither is given. src
// names where it came from, for messages.
func (a *app) passwordFile() (path, src string, err error) {
	path, src = a.passwordFlag, "--store-password-file"
	if path == "" {
		var set bool
		path, set = os.LookupEnv("ONCE_STORE_PASSWORD_FILE")
		src = "ONCE_STORE_PASSWORD_FILE"
		if set && path == "" {
			return "", "", usage("ONCE_STORE_PASSWORD_FILE is set but empty: unset it, or name the file that holds the store's password")
		}
		if path == "" {
			return "", "", nil
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", usage("%s %s: %v", src, path, err)
	}
	return abs, src, nil
}

// openStore opens dsn (as given: see dsn) with the password from the password file, if any, put
// into it in this process only: the password is never in once's argv, in the job's environment or
// in a message. It installs the one logger first, so that what a store logs while opening is in
// --log-format.
func (a *app) openStore(ctx context.Context, dsn string) (store.Store, error) {
	return a.openStoreWith(ctx, dsn, store.Open)
}

// openStoreToRead is openStore for a command that only reads the store (store.OpenReader): an
// embedded ledger it cannot write (a file system remounted read-only, another user's ledger) is
// opened read-only, not refused.
func (a *app) openStoreToRead(ctx context.Context, dsn string) (store.Store, error) {
	return a.openStoreWith(ctx, dsn, store.OpenReader)
}

func (a *app) openStoreWith(ctx context.Context, dsn string, open func(context.Context, string) (store.Store, error)) (store.Store, error) {
	if _, err := a.logger(); err != nil {
		return nil, err
	}
	full, err := a.withPassword(dsn)
	if err != nil {
		return nil, err
	}
	return open(ctx, full)
}

// withPassword is dsn with the password file's password in it, or dsn itself without a file.
func (a *app) withPassword(dsn string) (string, error) {
	path, src, err := a.passwordFile()
	if err != nil || path == "" {
		return dsn, err
	}
	scheme, err := store.Scheme(dsn)
	if err != nil {
		return "", err
	}
	if !slices.Contains(store.Schemes(), scheme) {
		return dsn, nil // store.Open says the scheme is unknown
	}
	if !store.AcceptsPassword(scheme) {
		return "", usage("%s %s: %s stores take no password (the store is %s); remove %s", src, path, scheme, store.Redact(dsn), src)
	}
	if store.HasPassword(dsn) {
		return "", usage("%s %s: the DSN %s has a password already; keep it in one place: remove it from the DSN, or drop %s", src, path, store.Redact(dsn), src)
	}
	pw, err := readPasswordFile(path)
	if err != nil {
		return "", usage("%s %s: %v", src, path, err)
	}
	return store.WithPassword(dsn, pw)
}

// storeEnv is what a command run by once (or a drill launch) gets to reach the same store: the DSN
// as given and, with a password file, its path — never the password itself. A password written in
// the DSN stays in ONCE_STORE (nested `once report` needs it; docs/security.md).
//
// A SQLite DSN's relative path is made absolute: the command may change directory, and a nested
// once must still reach this ledger, not create one there.
func (a *app) storeEnv(dsn string) []string {
	if sc, _ := store.Scheme(dsn); sc == "sqlite" {
		dsn = sqlite.AbsoluteDSN(dsn)
	}
	env := []string{"ONCE_STORE=" + dsn}
	if path, _, err := a.passwordFile(); err == nil && path != "" {
		env = append(env, "ONCE_STORE_PASSWORD_FILE="+path)
	}
	return env
}

// readPasswordFile reads a store password the way ssh and libpq read private files: the file
// itself (not a symbolic link), a regular file owned by the invoking user or root, with no access
// for group or others; one line, its newline trimmed. Errors say how to fix the file and never
// contain what is in it.
func readPasswordFile(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return "", fmt.Errorf("is a symbolic link: name the file itself")
	case errors.Is(err, unix.ENOENT):
		return "", fmt.Errorf("does not exist")
	case errors.Is(err, unix.EACCES):
		return "", fmt.Errorf("cannot be read by uid %d (permission denied)", os.Geteuid())
	case err != nil:
		return "", fmt.Errorf("cannot be opened: %v", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("cannot be read: %v", err)
	}
	me := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", fmt.Errorf("is not a regular file")
	case st.Uid != me && st.Uid != 0:
		return "", fmt.Errorf("is owned by uid %d, not by you (uid %d) or root: chown %d %s", st.Uid, me, me, shellQuote(path))
	case st.Mode&0o077 != 0:
		return "", fmt.Errorf("has mode %04o: group and others must have no access: chmod 600 %s", st.Mode&0o7777, shellQuote(path))
	case st.Size > maxPasswordFile:
		return "", fmt.Errorf("is larger than %d bytes: put only the password in it", maxPasswordFile)
	}
	buf := make([]byte, maxPasswordFile+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && n == 0 && st.Size > 0 {
		return "", fmt.Errorf("cannot be read: %v", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(buf[:n]), "\n"), "\r")
	switch {
	case n > maxPasswordFile:
		return "", fmt.Errorf("is larger than %d bytes: put only the password in it", maxPasswordFile)
	case pw == "":
		return "", fmt.Errorf("is empty: put the password in it")
	case strings.ContainsAny(pw, "\r\n\x00"):
		return "", fmt.Errorf("has more than one line: put only the password in it")
	}
	return pw, nil
}
