package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// buildTestImage builds the image of the host's platform twice (the same bytes both times) and
// returns the tar.
func buildTestImage(t *testing.T) (stamp, string) {
	t.Helper()
	s, bin := hostBinary(t)
	ps := []platform{{"linux", runtime.GOARCH}}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, out := range []string{a, b} {
		if err := buildImage(out, ps, []string{bin}, s); err != nil {
			t.Fatal(err)
		}
	}
	sameFile(t, a, b)
	return s, a
}

// readImage reads the image of the host's platform back from the tar, through the OCI layout's
// index.json and the index it names, as a runtime would.
func readImage(t *testing.T, tarPath string) (v1.ImageIndex, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, exec.Command("tar", "-xf", tarPath, "-C", dir))
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
		t.Fatalf("index.json %+v: want one index, named", m)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index %+v: want the image of linux/%s", im, runtime.GOARCH)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, img
}

// fileInImage is a file of the image's flattened file system.
type fileInImage struct {
	mode     int64
	uid, gid int
	typ      byte
	data     []byte
}

func imageFiles(t *testing.T, img v1.Image) map[string]fileInImage {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]fileInImage{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = fileInImage{h.Mode, h.Uid, h.Gid, h.Typeflag, data}
	}
}

// The image read back from its tar: the files with their modes and owners, the CA bundle of this
// machine, no zone database (the binary embeds it), user 65532, entrypoint /once, the labels.
func TestImageLayout(t *testing.T) {
	s, tarPath := buildTestImage(t)
	_, img := readImage(t, tarPath)
	files := imageFiles(t, img)
	for path, want := range map[string]struct {
		mode     int64
		uid      int
		typ      byte
		contains string
	}{
		"/once":                              {0o755, 0, tar.TypeReg, ""},
		"/once-shim":                         {0o755, 0, tar.TypeReg, ""},
		"/etc/passwd":                        {0o644, 0, tar.TypeReg, "once:x:65532:65532:once:/home/once:/sbin/nologin\n"},
		"/etc/group":                         {0o644, 0, tar.TypeReg, "once:x:65532:\n"},
		"/etc/ssl/certs/ca-certificates.crt": {0o644, 0, tar.TypeReg, "-----BEGIN CERTIFICATE-----"},
		"/home/once":                         {0o700, 65532, tar.TypeDir, ""},
		"/var/lib/once":                      {0o700, 65532, tar.TypeDir, ""},
		"/tmp":                               {0o1777, 0, tar.TypeDir, ""},
	} {
		f, ok := files[path]
		switch {
		case !ok:
			t.Errorf("the image has no %s", path)
		case f.mode != want.mode || f.uid != want.uid || f.gid != want.uid || f.typ != want.typ:
			t.Errorf("%s: mode %#o uid %d gid %d type %c; want %#o, %d, %d, %c", path, f.mode, f.uid, f.gid, f.typ, want.mode, want.uid, want.uid, want.typ)
		case !strings.Contains(string(f.data), want.contains):
			t.Errorf("%s does not contain %q", path, want.contains)
		}
	}
	if ca, _ := os.ReadFile(caFile); string(files[caFile].data) != string(ca) {
		t.Errorf("the image's %s is not this machine's", caFile)
	}
	for p := range files {
		if strings.HasPrefix(p, "/usr/share/zoneinfo") {
			t.Errorf("%s: the binary embeds the zone database; the image needs none", p)
		}
	}
	checkImageConfig(t, img, s)
}

func checkImageConfig(t *testing.T, img v1.Image, s stamp) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/once"}) || len(c.Cmd) != 0 || c.WorkingDir != "/home/once" {
		t.Errorf("config: user %q entrypoint %q cmd %q workdir %q; want 65532:65532, [/once], none, /home/once", c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	for _, e := range []string{"ONCE_HOME=/var/lib/once", "HOME=/home/once", "SSL_CERT_FILE=" + caFile} {
		if !slices.Contains(c.Env, e) {
			t.Errorf("config env %q: want %s", c.Env, e)
		}
	}
	if c.Labels["org.opencontainers.image.revision"] != s.Commit || c.Labels["org.opencontainers.image.version"] != s.Version {
		t.Errorf("labels %v: want revision %s, version %s", c.Labels, s.Commit, s.Version)
	}
	if !cf.Created.Time.Equal(s.Date) || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: created %v os %s arch %s; want %v (the commit's), linux, %s", cf.Created, cf.OS, cf.Architecture, s.Date, runtime.GOARCH)
	}
}

// rootfs writes the image's file system into a directory, with its modes and, as root, its owners.
func rootfs(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	files := imageFiles(t, img)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths) // parents first
	for _, p := range append([]string{"/"}, paths...) {
		f, dst := files[p], filepath.Join(dir, p)
		var err error
		if p == "/" || f.typ == tar.TypeDir {
			err = os.MkdirAll(dst, 0o755)
		} else {
			err = os.WriteFile(dst, f.data, 0o600)
		}
		if err == nil && p != "/" {
			err = os.Chmod(dst, os.FileMode(f.mode&0o777)|map[bool]os.FileMode{true: os.ModeSticky}[f.mode&0o1000 != 0])
		}
		if err == nil && os.Geteuid() == 0 {
			err = os.Lchown(dst, f.uid, f.gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The image's /once runs: on this machine, and as the image's user in a chroot of its file system
// (no /bin/sh, no zone files: once run --tz uses the embedded database), twice, the second
// skipping.
func TestImageRuns(t *testing.T) {
	s, tarPath := buildTestImage(t)
	_, img := readImage(t, tarPath)
	fs := rootfs(t, img)
	if out := mustRun(t, exec.Command(filepath.Join(fs, "once"), "version")); !strings.Contains(out, "commit: "+s.Commit) {
		t.Errorf("the image's /once version printed %q; want commit %s", out, s.Commit)
	}
	needRoot(t, "a chroot as uid 65532")
	// A container runtime mounts /proc; once's supervisor starts its shim through /proc/self/exe.
	proc := filepath.Join(fs, "proc")
	if err := os.Mkdir(proc, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("proc", proc, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		t.Skipf("mount proc on the chroot: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(proc, syscall.MNT_DETACH) })
	cf, _ := img.ConfigFile()
	once := func(args ...string) *exec.Cmd {
		c := exec.Command("/once", args...)
		c.Env, c.Dir = cf.Config.Env, cf.Config.WorkingDir
		c.SysProcAttr = &syscall.SysProcAttr{Chroot: fs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		return c
	}
	// A daily fire twelve hours away, so that none falls between the two runs (02:00 could); its
	// offset is +01:00 in winter and +02:00 in summer ("T02:00:00+01:00" failed from March to October).
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().In(berlin).Add(12 * time.Hour).Hour()
	slot := []string{"run", "--task", "t", "--schedule", fmt.Sprintf("0 %d * * *", hour), "--tz", "Europe/Berlin", "--", "/once", "version"}
	mustRun(t, once(slot...))
	mustRun(t, once(slot...))
	var hist []struct{ State, Slot string }
	if err := json.Unmarshal([]byte(mustRun(t, once("history", "--json"))), &hist); err != nil {
		t.Fatal(err)
	}
	fire := regexp.MustCompile(fmt.Sprintf(`T%02d:00:00\+0[12]:00$`, hour))
	if len(hist) != 2 || hist[0].State != "skipped" || hist[1].State != "succeeded" || !fire.MatchString(hist[1].Slot) {
		t.Errorf("history in the chroot %+v; want succeeded, then skipped, in a %02d:00 Europe/Berlin slot", hist, hour)
	}
	if fi, err := os.Stat(filepath.Join(fs, "var/lib/once/once.db")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65532 {
		t.Errorf("the ledger in /var/lib/once: %v; want it there, owned by 65532", err)
	}
}

// A container runtime runs the image from its tar: podman load, then podman run, with a volume on
// /var/lib/once. podman's storage is the test's own directory, nothing stays on the machine.
func TestImagePodman(t *testing.T) {
	needRoot(t, "podman with runc")
	podman := needTool(t, "podman", "podman")
	needTool(t, "runc", "runc")
	s, tarPath := buildTestImage(t)
	tmp := t.TempDir()
	base := []string{"--root", filepath.Join(tmp, "storage"), "--runroot", filepath.Join(tmp, "run"), "--storage-driver", "vfs",
		"--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "none"}
	p := func(args ...string) *exec.Cmd {
		return exec.Command(podman, append(append([]string{}, base...), args...)...)
	}
	out := mustRun(t, p("load", "-i", tarPath))
	ref := "localhost/once:" + imageTag(s)
	if !strings.Contains(out, ref) {
		t.Fatalf("podman load printed %q; want %s", out, ref)
	}
	t.Cleanup(func() { p("system", "reset", "--force").Run() })
	if err := os.Mkdir(filepath.Join(tmp, "vol"), 0o700); err != nil {
		t.Fatal(err)
	}
	var nofile syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	runArgs := func(args ...string) *exec.Cmd {
		// podman's default limits can be above what the machine allows a process (a container's
		// own limits here): ask for the current open files and a modest number of processes.
		return p(append([]string{"run", "--rm", "--network", "none", "-v", filepath.Join(tmp, "vol") + ":/var/lib/once:U",
			"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Max), "--ulimit", "nproc=4096:4096", ref}, args...)...)
	}
	if out := mustRun(t, runArgs("version")); !strings.Contains(out, "commit: "+s.Commit) {
		t.Errorf("podman run … version printed %q", out)
	}
	slot := []string{"run", "--task", "t", "--per", "day", "--", "/once", "version"}
	awayFromMidnight(t)
	mustRun(t, runArgs(slot...))
	mustRun(t, runArgs(slot...))
	if out := mustRun(t, runArgs("history", "--json")); strings.Count(out, `"state": "succeeded"`) != 1 || strings.Count(out, `"state": "skipped"`) != 1 {
		t.Errorf("history through podman: %s; want one succeeded, one skipped", out)
	}
}
