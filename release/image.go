package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageName is the image's file in dist/: an OCI image layout in a tar (podman load, skopeo copy
// oci-archive:, docker load since 25), holding one index of an image per platform.
const imageName = "once-image.tar"

// The image's user: no root inside the container. 65532 is the "nonroot" of distroless images, so
// files a volume already has for those images fit.
const (
	imageUID   = 65532
	imageUser  = "once"
	imageHome  = "/home/once"
	imageState = "/var/lib/once" // ONCE_HOME: the locks and the embedded ledger; mount a volume here
)

// caFile is the CA bundle the image carries, from the build machine's ca-certificates package:
// TLS to PostgreSQL, MySQL, Redis and etcd over the network needs it.
var caFile = "/etc/ssl/certs/ca-certificates.crt"

// entry is one file of a layer.
type entry struct {
	name     string // without a leading slash
	mode     int64  // permission bits (and sticky)
	uid      int
	dir      bool
	contents []byte
}

// baseEntries are the files every platform's image shares (one layer, stored once in the index):
// the users, the CA bundle, a home, a state directory and /tmp. No /usr/share/zoneinfo: the binary
// embeds Go's zone database (cmd/once imports time/tzdata), which serves --tz and $TZ.
func baseEntries() ([]entry, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w (Debian: apt-get install ca-certificates)", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", imageUser, imageUID, imageUID, imageUser, imageHome)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", imageUser, imageUID)
	return []entry{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, contents: []byte(group)},
		{name: "etc/passwd", mode: 0o644, contents: []byte(passwd)},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, contents: ca},
		{name: "home", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(imageHome, "/"), mode: 0o700, uid: imageUID, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "var", mode: 0o755, dir: true},
		{name: "var/lib", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(imageState, "/"), mode: 0o700, uid: imageUID, dir: true},
	}, nil
}

// layerTar is the uncompressed tar of entries, every time the commit's.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	data, err := layerTar(entries, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// labels are the image's org.opencontainers.image.* annotations.
func labels(s stamp) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "once",
		"org.opencontainers.image.description":   "Scheduled jobs that run once: COPY --from this image /once /usr/local/bin/once",
		"org.opencontainers.image.source":        "https://github.com/once-run/once",
		"org.opencontainers.image.url":           "https://github.com/once-run/once",
		"org.opencontainers.image.documentation": "https://github.com/once-run/once/blob/main/docs/install.md",
		"org.opencontainers.image.version":       s.Version,
		"org.opencontainers.image.revision":      s.Commit,
		"org.opencontainers.image.created":       s.Date.Format(time.RFC3339),
	}
}

// platformImage is the image of one platform: the base layer, then a layer with /once and /once-shim.
func platformImage(base v1.Layer, bin string, p platform, s stamp) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	shim, err := os.ReadFile(shimFile(bin))
	if err != nil {
		return nil, err
	}
	// once-shim beside /once: the shim once starts (supervise.DefaultShim).
	top, err := layer([]entry{{name: "once", mode: 0o755, contents: exe}, {name: "once-shim", mode: 0o755, contents: shim}}, s.Date)
	if err != nil {
		return nil, err
	}
	at := v1.Time{Time: s.Date}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: base, History: v1.History{Created: at, CreatedBy: "once release: users, CA certificates, /home/once, /var/lib/once, /tmp"}},
		mutate.Addendum{Layer: top, History: v1.History{Created: at, CreatedBy: "once release: /once /once-shim " + s.Version}})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = p.OS, p.Arch, at
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", imageUID, imageUID),
		Entrypoint: []string{"/once"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + imageHome, "ONCE_HOME=" + imageState, "SSL_CERT_FILE=" + caFile},
		WorkingDir: imageHome,
		Labels:     labels(s),
		Volumes:    map[string]struct{}{imageState: {}},
	}
	return mutate.ConfigFile(img, cfg)
}

// imageIndex is the index of the images of ps (bins[i] the binary of ps[i]).
func imageIndex(ps []platform, bins []string, s stamp) (v1.ImageIndex, error) {
	files, err := baseEntries()
	if err != nil {
		return nil, err
	}
	base, err := layer(files, s.Date)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, p := range ps {
		if p.OS != "linux" {
			return nil, fmt.Errorf("image platform %s: images are linux only", p)
		}
		img, err := platformImage(base, bins[i], p, s)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}}})
	}
	return mutate.Annotations(idx, labels(s)).(v1.ImageIndex), nil
}

// imageTag is the version as an image tag (no +: v0.0.0-…-1000cf5abcde-dirty).
func imageTag(s stamp) string { return strings.ReplaceAll(s.Version, "+", "-") }

// buildImage writes the OCI layout of the images of ps into the tar out.
func buildImage(out string, ps []platform, bins []string, s stamp) error {
	idx, err := imageIndex(ps, bins, s)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), "image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = l.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": imageTag(s),
		"io.containerd.image.name":          "once:" + imageTag(s),
	}))
	if err != nil {
		return err
	}
	return tarDir(dir, out, s.Date)
}

// tarDir writes the files under dir into the tar out, sorted, owned by root, with mtime.
func tarDir(dir, out string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		if err := tarFile(tw, dir, p, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func tarFile(tw *tar.Writer, dir, p string, mtime time.Time) error {
	rel, _ := filepath.Rel(dir, p)
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
	if fi.IsDir() {
		h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		return tw.WriteHeader(h)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}
