// Package deploy holds the deployment files of once daemon and once run (systemd units, Kubernetes
// manifests) and, in this test, the checks that keep them loadable: a typo in a unit is only a
// warning to systemd, which then runs the unit without the setting, and an unknown field in a
// manifest is dropped by a lenient client. It is a module of its own so that the Kubernetes API
// types it decodes with never become requirements of the once library (as bench/peers).
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/jobfile"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The daemon's defaults that the stop timeouts must stay above: --drain (issue 14) and a job's
// grace (once run --grace, the jobs file's grace).
const (
	drainDefault = 5 * time.Minute
	graceDefault = 10 * time.Second
)

// kinds are the API types the manifests may hold, by apiVersion and kind.
var kinds = map[string]func() any{
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"batch/v1/CronJob":              func() any { return &batchv1.CronJob{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// decodeAll decodes every YAML document of data strictly: an unknown or duplicate field, or a
// value of the wrong type, is an error.
func decodeAll(name string, data []byte) ([]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []any
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if tm.APIVersion == "" && tm.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // only comments
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: apiVersion %q kind %q: not a type this test knows (add it to kinds)", name, i, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := unmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", name, i, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
}

// unmarshalStrict decodes one YAML document as the API server does (field names case-sensitive,
// sigs.k8s.io/json), refusing what strict field validation refuses: a duplicate key, a field the
// type does not have. sigs.k8s.io/yaml's UnmarshalStrict alone matches names case-insensitively
// (encoding/json), so readOnlyRootFileSystem would pass it, and the server would drop the field.
func unmarshalStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
		}
	}
	return out
}

func decodeFile(t *testing.T, name string) []any {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// Every manifest decodes strictly into the Kubernetes API types.
func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	for _, f := range files {
		if objs := decodeFile(t, f); len(objs) == 0 {
			t.Errorf("%s: no documents", f)
		}
	}
}

// The strict decode has teeth: a misspelt field, a duplicate field and a wrong type are errors.
func TestStrictDecodeRefusesTypos(t *testing.T) {
	data, err := os.ReadFile("kubernetes/daemon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"terminationGracePeriodSeconds: 360", "terminationGracePeriodSecond: 360", "unknown field"},
		{"replicas: 3", "replicas: 3\n  replicas: 4", "already set"},
		{"replicas: 3", `replicas: "three"`, "cannot unmarshal"},
		{"readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "unknown field"},
	} {
		if !bytes.Contains(data, []byte(c.old)) {
			t.Fatalf("daemon.yaml has no %q", c.old)
		}
		bad := bytes.Replace(data, []byte(c.old), []byte(c.new), 1)
		if _, err := decodeAll("daemon.yaml", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: %v; want an error with %q", c.old, c.new, err, c.want)
		}
	}
}

type daemonManifest struct {
	jobs *corev1.ConfigMap
	dep  *appsv1.Deployment
	pdb  *policyv1.PodDisruptionBudget
}

func daemon(t *testing.T) daemonManifest {
	t.Helper()
	var m daemonManifest
	for _, o := range decodeFile(t, "kubernetes/daemon.yaml") {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			m.jobs = o
		case *appsv1.Deployment:
			m.dep = o
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		}
	}
	if m.jobs == nil || m.dep == nil || m.pdb == nil {
		t.Fatalf("daemon.yaml: want a ConfigMap, a Deployment and a PodDisruptionBudget")
	}
	return m
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// The Deployment runs what the daemon needs: 3 replicas, the jobs file of the ConfigMap (which the
// real parser accepts) given as a file, the store from a Secret, the pod's name as the node's, a
// stop grace above the drain, a non-root user, a state directory once trusts.
func TestDaemonDeployment(t *testing.T) {
	m := daemon(t)
	spec := m.dep.Spec.Template.Spec
	if r := m.dep.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("replicas %v, want 3", r)
	}
	for name, sel := range map[string]*metav1.LabelSelector{"Deployment": m.dep.Spec.Selector, "PodDisruptionBudget": m.pdb.Spec.Selector} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(labels.Set(m.dep.Spec.Template.Labels)) {
			t.Errorf("%s's selector %v does not select the pods (labels %v): %v", name, sel, m.dep.Spec.Template.Labels, err)
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drainDefault+graceDefault {
		t.Errorf("terminationGracePeriodSeconds %v: want more than the drain and the grace (%v)", g, drainDefault+graceDefault)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := append(slices.Clone(c.Command), c.Args...)
	if len(args) != 4 || args[0] != "/usr/bin/once" || args[1] != "daemon" || args[2] != "--jobs" {
		t.Fatalf("command %q, want /usr/bin/once daemon --jobs FILE", args)
	}
	checkJobsFile(t, m, c, args[3])

	if e := env(c, "ONCE_STORE"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("ONCE_STORE %+v: want it from a Secret", e)
	}
	if e := env(c, "ONCE_NODE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("ONCE_NODE %+v: want the pod's name (fieldRef metadata.name)", e)
	}
	checkStateDir(t, spec, c)

	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v: want allowPrivilegeEscalation false", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
}

// checkJobsFile: --jobs names a file of the ConfigMap's volume (not its directory, whose entries
// are symbolic links that a jobs directory refuses), and the file is a jobs file the daemon takes.
func checkJobsFile(t *testing.T, m daemonManifest, c corev1.Container, jobs string) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		key, ok := strings.CutPrefix(jobs, vm.MountPath+"/")
		if !ok || strings.Contains(key, "/") {
			continue
		}
		for _, v := range m.dep.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			if v.ConfigMap.Name != m.jobs.Name {
				t.Fatalf("--jobs %s is in ConfigMap %q, not %q of this file", jobs, v.ConfigMap.Name, m.jobs.Name)
			}
			data, ok := m.jobs.Data[key]
			if !ok {
				t.Fatalf("--jobs %s: ConfigMap %s has no key %q", jobs, m.jobs.Name, key)
			}
			got, err := jobfile.Parse(key, []byte(data))
			if err != nil {
				t.Fatalf("the ConfigMap's jobs file: %v", err)
			}
			if len(got) == 0 {
				t.Fatal("the ConfigMap's jobs file has no jobs")
			}
			return
		}
	}
	t.Fatalf("--jobs %s is not a file of a ConfigMap volume's mount", jobs)
}

// checkStateDir: ONCE_HOME lies on a memory-backed emptyDir, a tmpfs whose root is mode 1777
// (sticky), which once accepts above its private state; a disk emptyDir is 0777 without the
// sticky bit, which once refuses (internal/trust).
func checkStateDir(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	e := env(c, "ONCE_HOME")
	if e == nil || e.Value == "" {
		t.Fatal("ONCE_HOME is not set")
	}
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(e.Value, vm.MountPath+"/") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && !vm.ReadOnly {
				return
			}
		}
	}
	t.Errorf("ONCE_HOME %s: want a directory below a writable emptyDir of medium Memory", e.Value)
}

// cronjob.yaml is the README's CronJob, field for field.
func TestCronJobIsTheREADMEs(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(apiVersion: batch/v1\nkind: CronJob\n.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no CronJob block")
	}
	fromReadme, err := decodeAll("README.md", block[1])
	if err != nil {
		t.Fatal(err)
	}
	fromFile := decodeFile(t, "kubernetes/cronjob.yaml")
	if !reflect.DeepEqual(fromReadme, fromFile) {
		t.Errorf("kubernetes/cronjob.yaml differs from README.md's CronJob:\nREADME %+v\nfile   %+v", fromReadme, fromFile)
	}
}
