package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// platform is a GOOS/GOARCH pair.
type platform struct{ OS, Arch string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

// binaryName is the release file of p in dist/: once-linux-amd64.
func (p platform) binaryName() string { return "once-" + p.OS + "-" + p.Arch }

func parsePlatforms(list string) ([]platform, error) {
	var out []platform
	for _, f := range strings.Split(list, ",") {
		o, a, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || o == "" || a == "" {
			return nil, fmt.Errorf("platform %q: want GOOS/GOARCH, e.g. linux/amd64", f)
		}
		out = append(out, platform{o, a})
	}
	return out, nil
}

// buildEnv fixes everything in the environment that changes the bytes of a build: no cgo (a static
// binary, no C toolchain's version in it), the target, the instruction-set levels, no GOFLAGS of the
// person's own.
func buildEnv(p platform) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CGO_ENABLED", "GOOS", "GOARCH", "GOFLAGS", "GOAMD64", "GOARM64", "GOEXPERIMENT":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0")
}

// buildBinary builds cmd/once of the checkout at root for p into out, and on Linux cmd/once-shim
// (the supervision shim once starts from beside itself or ../libexec/once/) into shimFile(out):
// -trimpath (no paths of this machine), -buildvcs=false (the stamp says which commit), the stamp's
// fixed -ldflags.
func buildBinary(root, out string, p platform, s stamp) error {
	if err := goBuild(root, out, "./cmd/once", p, s); err != nil {
		return err
	}
	if p.OS != "linux" { // the shim is Linux's (supervise)
		return nil
	}
	return goBuild(root, shimFile(out), "./cmd/once-shim", p, s)
}

// shimFile is the file of the shim built with the binary bin: once-linux-amd64 → once-shim-linux-amd64.
func shimFile(bin string) string {
	dir, base := filepath.Split(bin)
	return filepath.Join(dir, "once-shim"+strings.TrimPrefix(base, "once"))
}

func goBuild(root, out, pkg string, p platform, s stamp) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", s.ldflags(), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = buildEnv(p)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %v\n%s", pkg, p, err, b)
	}
	return nil
}

// buildBinaries builds once (and its shim, buildBinary) for each platform into dir and returns the
// paths of the once binaries.
func buildBinaries(root, dir string, ps []platform, s stamp) ([]string, error) {
	var paths []string
	for _, p := range ps {
		out := filepath.Join(dir, p.binaryName())
		if err := buildBinary(root, out, p, s); err != nil {
			return nil, err
		}
		paths = append(paths, out)
	}
	return paths, nil
}

// writeChecksums writes dir/SHA256SUMS for the release files in dir (the binaries, the packages,
// the image), in the format `sha256sum -c SHA256SUMS` reads.
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && (strings.HasPrefix(n, "once-") || strings.HasSuffix(n, ".deb")) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
