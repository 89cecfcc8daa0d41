// Command release builds once's release files into a directory (dist/ from the Makefile): static
// binaries with SHA256SUMS, the Debian package and the container image, all reproducible (the same
// commit gives the same bytes). It is a module of its own so that the packagers it uses (nfpm,
// go-containerregistry) stay out of the library's go.mod.
//
//	go run . [-root ..] [-out ../dist] binaries [-platforms linux/amd64,linux/arm64,darwin/arm64]
//	go run . [-root ..] [-out ../dist] deb [-arch amd64]
//	go run . [-root ..] [-out ../dist] image [-platforms linux/amd64,linux/arm64]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release: "+err.Error())
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	root := fs.String("root", "..", "the checkout to build")
	out := fs.String("out", "../dist", "where the release files go")
	platforms := fs.String("platforms", "", "GOOS/GOARCH,… (binaries: linux/amd64,linux/arm64,darwin/arm64; image: linux/amd64,linux/arm64)")
	arch := fs.String("arch", runtime.GOARCH, "deb: the package's architecture (amd64 or arm64)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want one of binaries, deb, image (got %q)", fs.Args())
	}
	// go build runs in root: a relative -out must not be taken from there.
	for _, p := range []*string{root, out} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	s, err := readStamp(*root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "binaries":
		err = cmdBinaries(*root, *out, *platforms, s)
	case "deb":
		err = cmdDeb(*root, *out, *arch, s)
	case "image":
		err = cmdImage(*root, *out, *platforms, s)
	default:
		return fmt.Errorf("%q: want one of binaries, deb, image", fs.Arg(0))
	}
	if err != nil {
		return err
	}
	return writeChecksums(*out)
}

func cmdBinaries(root, out, list string, s stamp) error {
	if list == "" {
		list = "linux/amd64,linux/arm64,darwin/arm64"
	}
	ps, err := parsePlatforms(list)
	if err != nil {
		return err
	}
	paths, err := buildBinaries(root, out, ps, s)
	for i, p := range paths {
		fmt.Println(p)
		if ps[i].OS == "linux" {
			fmt.Println(shimFile(p))
		}
	}
	return err
}

func cmdDeb(root, out, arch string, s stamp) error {
	p := platform{"linux", arch}
	bin := filepath.Join(out, p.binaryName())
	if err := buildBinary(root, bin, p, s); err != nil {
		return err
	}
	deb := filepath.Join(out, debName(s, arch))
	if err := buildDeb(root, out, bin, arch, deb, s); err != nil {
		return err
	}
	fmt.Println(deb)
	return nil
}

func cmdImage(root, out, list string, s stamp) error {
	if list == "" {
		list = "linux/amd64,linux/arm64"
	}
	ps, err := parsePlatforms(list)
	if err != nil {
		return err
	}
	bins, err := buildBinaries(root, out, ps, s)
	if err != nil {
		return err
	}
	tar := filepath.Join(out, imageName)
	if err := buildImage(tar, ps, bins, s); err != nil {
		return err
	}
	fmt.Println(tar)
	return nil
}
