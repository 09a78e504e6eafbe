package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

var upstream = filepath.Join("..", "..", "testdata", "cluster", "upstream")

// TestReadUpstreamExamples: the projects' own example manifests decode
// strictly into the local types.
func TestReadUpstreamExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, kind, name string
	}{
		{"karpenter-default-nodepool.yaml", KindNodePool, "default"},
		{"keda-scaledjob-sample.yaml", KindScaledJob, "scaledjob-sample"},
		{"keda-scaledobject-sample.yaml", KindScaledObject, "example-scaledobject"},
		{"nvidia-device-plugin.yml", "DaemonSet", "nvidia-device-plugin-daemonset"},
		{"nvidia-device-plugin-values.yaml", KindHelmValues, "nvidia-device-plugin-values.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			objs, skipped, err := ReadFS(os.DirFS(upstream), tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 1 || len(skipped) != 0 {
				t.Fatalf("got %d objects, %d skipped; want 1, 0", len(objs), len(skipped))
			}
			if o := objs[0]; o.Kind != tt.kind || o.Name != tt.name {
				t.Errorf("got %s %q, want %s %q", o.Kind, o.Name, tt.kind, tt.name)
			}
		})
	}
}

func TestReadUpstreamValuesDefaults(t *testing.T) {
	t.Parallel()
	objs, _, err := ReadFS(os.DirFS(upstream), "nvidia-device-plugin-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := objs[0].Values
	if v.Affinity == nil || len(v.Tolerations) != 2 || v.GFD == nil || v.GFD.Enabled == nil || *v.GFD.Enabled {
		t.Errorf("chart defaults not read: affinity %v, tolerations %v, gfd %+v", v.Affinity, v.Tolerations, v.GFD)
	}
	// The chart's defaults are what valuesPodSpec assumes for an absent key.
	if got := valuesPodSpec(&DevicePluginValues{}); len(got.Tolerations) != len(v.Tolerations) ||
		len(got.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) !=
			len(v.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) {
		t.Errorf("valuesPodSpec's defaults %+v differ from the chart's %+v", got, v)
	}
}

func TestReadStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field in a Deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      nodeSelectr: {a: b}\n", "nodeSelectr"},
		{"duplicate key", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nmetadata: {name: y}\n", "already set"},
		{"case-insensitive match refused", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {NodeSelector: {a: b}}\n", "NodeSelector"},
		{"unknown field in a NodePool", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      taint: []\n      requirements: []\n      nodeClassRef: {group: g, kind: k, name: default}\n", "taint"},
		{"unknown field in a ScaledJob", "apiVersion: keda.sh/v1alpha1\nkind: ScaledJob\nmetadata: {name: x}\nspec:\n  jobTargetRef: {template: {}}\n  maxReplicas: 3\n  triggers: []\n", "maxReplicas"},
		{"a typo in the chart's values", "nodeSelectors: {a: b}\n", "nodeSelectors"},
		{"a list as a document", "- a\n- b\n", "not a mapping"},
		{"a ScaledJob without jobTargetRef", "apiVersion: keda.sh/v1alpha1\nkind: ScaledJob\nmetadata: {name: x}\nspec:\n  triggers: []\n", "jobTargetRef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Read("m.yaml", strings.NewReader(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, fault.ErrMalformed) {
				t.Errorf("err = %v; want a malformed-input error naming %q", err, tt.want)
			}
		})
	}
}

func TestReadDocumentsAndLists(t *testing.T) {
	t.Parallel()
	in := `# comment only
---
apiVersion: v1
kind: Service
metadata: {name: svc}
---
apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: Job
  metadata: {name: j, namespace: ns}
  spec: {template: {spec: {containers: [{name: c, image: i}]}}}
- apiVersion: batch/v1
  kind: CronJob
  metadata: {name: cj}
  spec: {schedule: "* * * * *", jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
`
	objs, skipped, err := Read("m.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range objs {
		ids = append(ids, o.ID()+"@"+o.Source)
	}
	if got, want := strings.Join(ids, " "), "job/ns/j@m.yaml#3/items/0 cronjob/cj@m.yaml#3/items/1"; got != want {
		t.Errorf("objects %s, want %s", got, want)
	}
	if len(skipped) != 2 || skipped[0].Kind != "Service" || skipped[1].APIVersion != "karpenter.sh/v1beta1" {
		t.Errorf("skipped %+v", skipped)
	}
}

// FuzzRead: the manifest reader returns objects or an error, never panics,
// and every error is marked malformed.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"karpenter-default-nodepool.yaml", "keda-scaledjob-sample.yaml", "nvidia-device-plugin.yml", "nvidia-device-plugin-values.yaml"} {
		data, err := os.ReadFile(filepath.Join(upstream, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Pod, metadata: {name: p}}]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, {"nodeSelector": {}}, [1]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _, err := Read("fuzz.yaml", strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		r := Check(objs, nil, CheckOptions{Pool: seedPool(t)})
		if len(r.Columns) == 0 {
			t.Fatal("no columns")
		}
	})
}

// TestReadErrorsOneLine: a decoder error of several lines (strict decoding's
// joined unknown fields, yaml's "unmarshal errors:" list) is one line, every
// part kept, still marked malformed.
func TestReadErrorsOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"two unknown fields", "join: {labels: [a=b]}\ncluster: {poolLabel: a=b}\n", []string{`unknown field "cluster"; unknown field "join"`}},
		{"duplicate keys", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nmetadata: {name: y}\nspec: {}\nspec: {}\n", []string{"unmarshal errors: line 4", "; line 6"}},
		{"two unknown fields in a Deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1, templat: {}}\n", []string{`unknown field "spec.replica"; unknown field "spec.templat"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Read("m.yaml", strings.NewReader(tt.doc))
			if err == nil || !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("err = %v; want a malformed-input error", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
		})
	}
}

// TestReadBoundsTheStream: a stream longer than
// bounded.MaxClusterManifests (here one line that never ends) is refused
// as malformed, too large, once that much is read; a document over
// bounded.MaxClusterDocument is refused naming it.
func TestReadBoundsTheStream(t *testing.T) {
	t.Parallel()
	_, _, err := Read("stdin", testkit.Endless{})
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), `reading manifest "stdin": more than the 64 MiB nodeprep reads`) {
		t.Errorf("endless stream: %v; want malformed, too large, naming it", err)
	}
	doc := "a: " + strings.Repeat("x", bounded.MaxClusterDocument) + "\n"
	_, _, err = Read("m.yaml", strings.NewReader(doc))
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), `reading manifest "m.yaml" document 1: larger than 16 MiB`) {
		t.Errorf("large document: %v; want malformed naming it", err)
	}
}

// TestReaderIsConfig: a document Reader.IsConfig recognises is skipped as
// nodeprep's config; without the recogniser it is malformed, and the
// recogniser is not asked about the chart's values or a known kind.
func TestReaderIsConfig(t *testing.T) {
	t.Parallel()
	in := "join: {labels: [payload=task_runner]}\ncluster: {poolLabel: payload=task_runner}\n---\nnodeSelector: {a: b}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\n"
	var asked []string
	rd := Reader{IsConfig: func(doc []byte) bool {
		asked = append(asked, string(doc))
		var m map[string]any
		_ = json.Unmarshal(doc, &m)
		_, ok := m["join"]
		return ok
	}}
	objs, skipped, err := rd.Read("dir/config.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Kind != KindHelmValues || objs[1].Kind != "Pod" {
		t.Errorf("objects %+v, want the values and the Pod", objs)
	}
	if len(skipped) != 1 || skipped[0].Kind != KindNodeprepConfig || skipped[0].Source != "dir/config.yaml#1" {
		t.Errorf("skipped %+v, want the config as %s", skipped, KindNodeprepConfig)
	}
	if len(asked) != 1 {
		t.Errorf("IsConfig asked about %d documents, want only the config: %q", len(asked), asked)
	}
	if _, _, err := Read("dir/config.yaml", strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "nodeprep's config") {
		t.Errorf("without IsConfig: err = %v, want the config refused", err)
	}
}

// TestReadBadQuantities: a quantity the parser refuses, and a negative or
// fractional nvidia.com/gpu, are malformed input named by the object, the
// field path and the value as written (1.5, not the parser's 1500m).
func TestReadBadQuantities(t *testing.T) {
	t.Parallel()
	job := func(gpu string) string {
		return "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns}\nspec: {template: {spec: {containers: [{name: c, image: i}, {name: d, image: i, resources: {requests: {cpu: 1, nvidia.com/gpu: " + gpu + "}}}]}}}\n"
	}
	tests := []struct{ doc, want string }{
		{job(`"lots"`), `f.yaml#1: job/ns/j: spec.template.spec.containers[1].resources.requests[nvidia.com/gpu]: "lots" is not a quantity`},
		{job("-3"), `job/ns/j: spec.template.spec.containers[1].resources.requests[nvidia.com/gpu]: -3: want a whole number of GPUs`},
		{job("1.5"), `spec.template.spec.containers[1].resources.requests[nvidia.com/gpu]: 1.5: want a whole number`},
		{job("2e-1"), `requests[nvidia.com/gpu]: 0.2: want a whole number`}, // a YAML number reaches JSON as YAML's value
		{job(`"2e-1"`), `requests[nvidia.com/gpu]: 2e-1: want a whole number`},
		{job(`"1500m"`), `requests[nvidia.com/gpu]: 1500m: want a whole number`},
		{"apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec: {schedule: '* * * * *', jobTemplate: {spec: {template: {spec: {initContainers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: -1}}}]}}}}}\n",
			`cronjob/c: spec.jobTemplate.spec.template.spec.initContainers[0].resources.limits[nvidia.com/gpu]: -1`},
		{"apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec: {template: {spec: {requirements: [], nodeClassRef: {group: g, kind: k, name: x}}}, limits: {nvidia.com/gpu: -4}}\n",
			`nodepool/np: spec.limits[nvidia.com/gpu]: -4`},
		{"apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec: {template: {spec: {requirements: [], nodeClassRef: {group: g, kind: k, name: x}}}, limits: {cpu: 1x}}\n",
			`nodepool/np: spec.limits[cpu]: "1x" is not a quantity`},
	}
	for _, tt := range tests {
		_, _, err := Read("f.yaml", strings.NewReader(tt.doc))
		if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want malformed naming %q", err, tt.want)
		}
	}
	// Zero and whole numbers are fine.
	for _, gpu := range []string{"0", "2", `"4"`} {
		if _, _, err := Read("f.yaml", strings.NewReader(job(gpu))); err != nil {
			t.Errorf("nvidia.com/gpu %s: %v", gpu, err)
		}
	}
}

// TestReadFSNotRegular: a named pipe, socket, device, dangling or looping
// symlink, named or in a directory, is malformed input named by its path,
// and nothing blocks on it; a symlink to a manifest is read; the null
// device reads as empty.
func TestReadFSNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := []byte("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: {spec: {containers: [{name: c, image: i}]}}}\n")
	mk := func(sub string) string {
		d := filepath.Join(dir, sub)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "a.yaml"), job, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	fifo := mk("fifo")
	if err := syscall.Mkfifo(filepath.Join(fifo, "f.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	dangling := mk("dangling")
	os.Symlink("missing.yaml", filepath.Join(dangling, "l.yaml"))
	loop := mk("loop")
	os.Symlink("l.yaml", filepath.Join(loop, "l.yaml"))
	sock := mk("sock")
	ln, err := net.Listen("unix", filepath.Join(sock, "s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	subdir := mk("subdir")
	os.Mkdir(filepath.Join(subdir, "d.yaml"), 0o755)
	linked := mk("linked")
	os.Symlink("a.yaml", filepath.Join(linked, "b.yaml"))
	os.Symlink("missing", filepath.Join(linked, "not-a-manifest")) // not a manifest name: ignored

	fsys := os.DirFS(dir)
	tests := []struct{ name, want string }{
		{"fifo/f.yaml", `reading manifests "fifo/f.yaml": it is a named pipe (FIFO), not a regular file`},
		{"fifo", `"fifo/f.yaml" is a named pipe (FIFO)`},
		{"dangling", `"dangling/l.yaml" is a symlink that does not resolve (no such file or directory)`},
		{"dangling/l.yaml", `reading manifests "dangling/l.yaml"`},
		{"loop", `"loop/l.yaml" is a symlink that does not resolve (too many levels of symbolic links)`},
		{"sock", `"sock/s.yaml" is a socket`},
		{"sock/s.yaml", `it is a socket, not a regular file`},
		{"subdir", `"subdir/d.yaml" is a directory`},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() { _, _, err := ReadFS(fsys, tt.name); done <- err }()
		select {
		case err := <-done:
			if !strings.Contains(fmt.Sprint(err), tt.want) {
				t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
			}
			kind := fault.ErrMalformed
			if tt.name == "dangling/l.yaml" {
				kind = fault.ErrUnavailable // a named dangling symlink is a missing file
			}
			if !errors.Is(err, kind) {
				t.Errorf("%s: %v is not marked %v", tt.name, err, kind)
			}
		case <-time.After(time.Minute):
			t.Fatalf("ReadFS(%s) blocks", tt.name) // a hang guard, not a timing target
		}
	}
	objs, _, err := ReadFS(fsys, "linked")
	if err != nil || len(objs) != 2 || objs[1].Source != "linked/b.yaml#1" {
		t.Errorf("linked: %v, %+v", err, objs)
	}
	if objs, skip, err := ReadFS(os.DirFS(filepath.Dir(os.DevNull)), filepath.Base(os.DevNull)); err != nil || len(objs)+len(skip) != 0 {
		t.Errorf("%s: %v, %d objects", os.DevNull, err, len(objs))
	}
	if _, _, err := ReadFS(os.DirFS("/dev"), "zero"); !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "a character device") {
		t.Errorf("/dev/zero: %v", err)
	}
}

// TestReadFSSkipsHiddenDirs: a directory read descends into subdirectories
// but not hidden ones (.git), whose manifest-named files, even broken ones,
// are not read; a hidden file in a read directory is read.
func TestReadFSSkipsHiddenDirs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := func(name string) []byte {
		return []byte("apiVersion: batch/v1\nkind: Job\nmetadata: {name: " + name + "}\nspec: {template: {spec: {containers: [{name: c, image: i}]}}}\n")
	}
	files := map[string][]byte{
		"m/a.yaml":               job("a"),
		"m/sub/b.yml":            job("b"),
		"m/.c.yaml":              job("c"),
		"m/.git/config.yaml":     []byte("{not: [yaml"),
		"m/.git/refs/d.json":     job("d"),
		"m/sub/.cache/e.yaml":    job("e"),
		"m/sub/.hidden.d/f.yaml": job("f"),
	}
	for p, data := range files {
		p = filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, _, err := ReadFS(os.DirFS(dir), "m")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Name)
	}
	if want := []string{"c", "a", "b"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("read %q, want %q (no hidden directory)", got, want)
	}
}

// TestReadFSNamesPathAsGiven: a missing path is named as the user gave it,
// leading slash included, in the whole message.
func TestReadFSNamesPathAsGiven(t *testing.T) {
	t.Parallel()
	rd := Reader{Dir: "/"}
	_, _, err := rd.ReadFS(os.DirFS("/"), "nodeprep-test-nope")
	if !errors.Is(err, fault.ErrUnavailable) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want unavailable, not exist", err)
	}
	if msg := err.Error(); strings.Count(msg, "/nodeprep-test-nope") != 2 || strings.Contains(msg, " nodeprep-test-nope") {
		t.Errorf("err = %q, want /nodeprep-test-nope named as given throughout", msg)
	}
}
