package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// cliPkg is the package whose Version, Commit and Date variables the build stamps.
const cliPkg = "github.com/once-run/once/internal/cli"

// stamp is what a release build writes into the binary: all of it read from the commit, none of it
// from the clock or the machine, so that two builds of one commit are the same bytes.
type stamp struct {
	Version string    // v1.2.3 at a tag, else a Go pseudo-version; +dirty when the tree has changes
	Commit  string    // 40 hex digits
	Date    time.Time // the commit's time (or SOURCE_DATE_EPOCH), UTC
}

// readStamp reads the stamp of the checkout at root. $VERSION overrides the version and
// $SOURCE_DATE_EPOCH the date (the reproducible-builds convention).
func readStamp(root string) (stamp, error) {
	var s stamp
	commit, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return s, err
	}
	s.Commit = commit
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(root, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return s, err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return s, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
	}
	s.Date = time.Unix(sec, 0).UTC()
	s.Version = os.Getenv("VERSION")
	if s.Version == "" {
		s.Version, err = gitVersion(root, s)
	}
	if err == nil && !versionRE.MatchString(s.Version) {
		err = fmt.Errorf("version %q: want v1.2.3, v1.2.3-rc.1 or a Go pseudo-version (letters, digits, . - + only)", s.Version)
	}
	return s, err
}

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]*)?$`)

// releaseRE is a tag a pseudo-version can follow: vMAJOR.MINOR.PATCH with an optional pre-release.
var releaseRE = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$`)

// gitVersion is the tag v* at HEAD, else the pseudo-version go install would give the commit, with
// +dirty when tracked files differ from it: v0.0.0-20261203061335-1000cf5abcde with no tag before
// it, v1.2.4-0.20261203061335-1000cf5abcde after v1.2.3, v1.3.0-rc.1.0.20261203061335-1000cf5abcde
// after v1.3.0-rc.1 (go.dev/ref/mod#pseudo-versions), so that it sorts after the release it follows
// (and its package is an upgrade of that release's, not a downgrade).
func gitVersion(root string, s stamp) (string, error) {
	v, err := git(root, "describe", "--tags", "--exact-match", "--match", "v[0-9]*", "HEAD")
	if err != nil { // no such tag at HEAD
		suffix := s.Date.Format("20060102150405") + "-" + s.Commit[:12]
		v = "v0.0.0-" + suffix
		if base, err := git(root, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD"); err == nil {
			if m := releaseRE.FindStringSubmatch(base); m != nil && m[4] == "" {
				patch, _ := strconv.Atoi(m[3])
				v = fmt.Sprintf("v%s.%s.%d-0.%s", m[1], m[2], patch+1, suffix)
			} else if m != nil {
				v = base + ".0." + suffix
			}
		}
	}
	dirty, err := git(root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	if dirty != "" {
		v += "+dirty"
	}
	return v, nil
}

func git(root string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// ldflags strips the symbol table and DWARF (-s -w: a release binary; stack traces keep their
// function names and lines) and stamps the version, the commit and its date.
func (s stamp) ldflags() string {
	return fmt.Sprintf("-s -w -X %[1]s.Version=%[2]s -X %[1]s.Commit=%[3]s -X %[1]s.Date=%[4]s",
		cliPkg, s.Version, s.Commit, s.Date.Format(time.RFC3339))
}

// debVersion is the Debian version of the package: upstream version without the v, a Go
// pre-release or pseudo-version part after a ~ (so that it sorts before the release), then the
// Debian revision -1. v1.2.3 → 1.2.3-1; v0.0.0-20261203061335-1000cf5abcde →
// 0.0.0~20261203061335.1000cf5abcde-1.
func (s stamp) debVersion() string {
	v := strings.TrimPrefix(s.Version, "v")
	meta := ""
	if i := strings.IndexByte(v, '+'); i >= 0 { // build metadata: a hyphen there is no revision's
		v, meta = v[:i], strings.ReplaceAll(v[i:], "-", ".")
	}
	if base, pre, ok := strings.Cut(v, "-"); ok {
		v = base + "~" + strings.ReplaceAll(pre, "-", ".")
	}
	return v + meta + "-1"
}
