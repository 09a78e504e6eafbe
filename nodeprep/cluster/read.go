package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// Object is one document of a manifest, decoded. Exactly one of PodSpec
// (a workload), ScaledJob, ScaledObject, NodePool, Values or RuntimeClass
// is set (a ScaledJob sets PodSpec too).
type Object struct {
	// Source is where the document came from: "file.yaml#2" (the second
	// document; List items add "/items/N").
	Source    string `json:"source"`
	Kind      string `json:"kind"` // Deployment, Job, ..., or "HelmValues" for the device plugin's values
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// PodSpec is a workload's pod template spec (a Pod's own spec).
	PodSpec      *corev1.PodSpec     `json:"-"`
	ScaledJob    *ScaledJob          `json:"-"`
	ScaledObject *ScaledObject       `json:"-"`
	NodePool     *NodePool           `json:"-"`
	Values       *DevicePluginValues `json:"-"`
	// RuntimeClass is a node.k8s.io/v1 RuntimeClass.
	RuntimeClass *nodev1.RuntimeClass `json:"-"`
}

// ID names the object in reports: "kind/namespace/name", or "kind/name"
// without a namespace.
func (o *Object) ID() string {
	k := strings.ToLower(o.Kind)
	if o.Namespace != "" {
		return k + "/" + o.Namespace + "/" + o.Name
	}
	return k + "/" + o.Name
}

// Skipped is a document Read did not judge: a kind outside the package's
// set (Service, ConfigMap, ...) or a known kind at an API version it does
// not read.
type Skipped struct {
	Source     string `json:"source"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name,omitempty"`
}

// KindHelmValues is Object.Kind for the device plugin chart's values file.
const KindHelmValues = "HelmValues"

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// Read decodes every document of a multi-document YAML stream named name.
// Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod and RuntimeClass
// (their k8s.io/api types), KEDA ScaledJob and ScaledObject (keda.sh/v1alpha1), Karpenter
// NodePool (karpenter.sh/v1) and a v1 List of them decode strictly: an
// unknown or duplicate field is an error. A document that is a sequence
// (`cluster render -o json` prints one) is read item by item. A document
// with neither apiVersion nor kind must be the device plugin chart's values
// (DevicePluginValues). Other kinds are returned as Skipped. A stream of
// more than bounded.MaxClusterManifests bytes (64 MiB) is refused before
// any of it is decoded (an error wrapping bounded.ErrTooLarge), as is a
// document of more than bounded.MaxClusterDocument (16 MiB), one whose
// aliases expand it past yamlbound.MaxClusterDocument, or the documents
// holding aliases so far past it together (both wrapping
// yamlbound.ErrExpands; ReadFS counts the documents of all its files),
// and a stream holding a NUL byte. Errors name
// the document, are one line, and are marked fault.ErrMalformed.
func Read(name string, r io.Reader) ([]Object, []Skipped, error) {
	return Reader{}.Read(name, r)
}

// Reader reads manifests as Read and ReadFS do, with the caller's
// recognisers for documents that are not manifests.
type Reader struct {
	// IsConfig reports whether a document with neither apiVersion nor kind,
	// and not the device plugin chart's values, is nodeprep's own config
	// (given as JSON). Such a document is returned as Skipped with
	// KindNodeprepConfig instead of failing: a directory of manifests often
	// holds the config.yaml the nodes join with. The package does not
	// decode the config itself (it sits below package nodeprep, which
	// does). Nil recognises none.
	IsConfig func(doc []byte) bool
	// Dir, when set, is where fsys is rooted as the user would name it
	// ("manifests/" for os.DirFS of its absolute path): ReadFS's own
	// errors name files by Dir joined with their fsys path, so that a
	// message names the path the user gave. Sources are not changed.
	Dir string

	// budget is what the aliases of every document one Read or ReadFS
	// reads may expand them to together: yamlbound.MaxClusterDocument,
	// what one document may expand to.
	budget *yamlbound.Budget
}

// display names the fsys path p in ReadFS's messages: joined to rd.Dir.
func (rd Reader) display(p string) string {
	if rd.Dir == "" {
		return p
	}
	return filepath.Join(rd.Dir, filepath.FromSlash(p))
}

// pathErr returns err with the path of an *fs.PathError in it named as
// display names it: fsys paths are relative ("nope" for the user's
// "/nope"), and a message must name the path the user gave. Other errors
// come back as they are.
func (rd Reader) pathErr(err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	return &fs.PathError{Op: pe.Op, Path: rd.display(pe.Path), Err: pe.Err}
}

// KindNodeprepConfig is Skipped.Kind for a document Reader.IsConfig
// recognised as nodeprep's config.
const KindNodeprepConfig = "NodeprepConfig"

// Read is the package's Read with r's recognisers.
func (rd Reader) Read(name string, r io.Reader) ([]Object, []Skipped, error) {
	if rd.budget == nil {
		rd.budget = yamlbound.NewBudget(yamlbound.MaxClusterDocument)
	}
	// The whole stream first, bounded: the YAML reader gathers a document
	// (and a line) whole, so a stream of one endless line would take its
	// size in memory before a document's size could be judged.
	data, err := bounded.ReadAll(r, bounded.MaxClusterManifests)
	if err != nil {
		return nil, nil, fault.Malformed(oneLine(fmt.Errorf("reading manifest %q: %w", name, err)))
	}
	// YAML text holds no NUL (YAML 1.2 c-printable), and the YAML
	// parsers take one for the end of the text: a file of NULs would read
	// as no manifest at all.
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, nil, fault.Malformed(fmt.Errorf("reading manifest %q: a NUL byte at offset %d: not YAML or JSON text", name, i))
	}
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var (
		objs []Object
		skip []Skipped
	)
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return objs, skip, nil
		}
		if err != nil {
			return nil, nil, fault.Malformed(oneLine(fmt.Errorf("reading manifest %q: %w", name, err)))
		}
		if len(doc) > bounded.MaxClusterDocument {
			return nil, nil, fault.Malformed(fmt.Errorf("reading manifest %q document %d: larger than %d MiB", name, n, bounded.MaxClusterDocument>>20))
		}
		src := fmt.Sprintf("%s#%d", name, n)
		// Before YAMLToJSONStrict, which writes every alias out in full
		// (a 200 KB manifest took 1.6 GiB).
		if err := rd.budget.CheckFirst(doc, yamlbound.MaxClusterDocument); err != nil {
			return nil, nil, fault.Malformed(fmt.Errorf("reading manifest %s: %w", src, err))
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, nil, fault.Malformed(oneLine(fmt.Errorf("reading manifest %s: %w", src, err)))
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue // an empty document: comments only, or a leading ---
		}
		if err := rd.decodeDoc(src, js, &objs, &skip); err != nil {
			return nil, nil, fault.Malformed(oneLine(fmt.Errorf("reading manifest %s: %w", src, err)))
		}
	}
}

// lineError is an error whose message is one line: the decoders' messages
// may span several (errors.Join, yaml's "unmarshal errors:\n  line 3: ..."),
// and a report prints one finding per line. Each line goes through
// Printable: the messages quote names and values from the manifest.
type lineError struct{ err error }

func (e lineError) Error() string {
	var b strings.Builder
	for _, l := range strings.Split(e.err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ") // "unmarshal errors:" introduces the next line
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(Printable(l)) // names and values quoted from the manifest
	}
	return b.String()
}

func (e lineError) Unwrap() error { return e.err }

// oneLine returns err with its message on one line: lines joined with "; ".
func oneLine(err error) error { return lineError{err} }

func (rd Reader) decodeDoc(src string, js []byte, objs *[]Object, skip *[]Skipped) error {
	if len(js) > 0 && js[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(js, &items); err != nil {
			return err
		}
		for i, it := range items {
			if err := rd.decodeDoc(fmt.Sprintf("%s/%d", src, i), it, objs, skip); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	}
	if len(js) == 0 || js[0] != '{' {
		return errors.New("not a mapping")
	}
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return err
	}
	id := (&Object{Kind: tm.Kind, Name: tm.Metadata.Name, Namespace: tm.Metadata.Namespace}).ID()
	strict := func(v any) error {
		strictErrs, err := kjson.UnmarshalStrict(js, v)
		if err != nil {
			// The quantity parser's error names neither the field nor
			// the value: find them.
			if p, val, ok := badQuantity(js); ok {
				return fmt.Errorf("%s: %s: %s is not a quantity (%w)", Printable(id), p, Printable(val), err)
			}
			return err
		}
		return errors.Join(strictErrs...)
	}
	if tm.APIVersion == "" && tm.Kind == "" {
		var v DevicePluginValues
		if err := strict(&v); err != nil {
			if rd.IsConfig != nil && rd.IsConfig(js) {
				*skip = append(*skip, Skipped{Source: src, Kind: KindNodeprepConfig})
				return nil
			}
			return fmt.Errorf("no apiVersion or kind, and not the nvidia-device-plugin chart's values nor nodeprep's config: %w", err)
		}
		*objs = append(*objs, Object{Source: src, Kind: KindHelmValues, Name: path.Base(strings.SplitN(src, "#", 2)[0]), Values: &v})
		return nil
	}
	o := Object{Source: src, Kind: tm.Kind}
	var meta *metaRef
	specPath := "spec.template.spec" // where the kind keeps its pod spec
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 List":
		var l struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   json.RawMessage   `json:"metadata,omitempty"`
			Items      []json.RawMessage `json:"items"`
		}
		if err := strict(&l); err != nil {
			return err
		}
		for i, it := range l.Items {
			if err := rd.decodeDoc(fmt.Sprintf("%s/items/%d", src, i), it, objs, skip); err != nil {
				return fmt.Errorf("items[%d]: %w", i, err)
			}
		}
		return nil
	case "apps/v1 Deployment":
		var v appsv1.Deployment
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec.Template.Spec, &metaRef{v.Name, v.Namespace}
	case "apps/v1 StatefulSet":
		var v appsv1.StatefulSet
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec.Template.Spec, &metaRef{v.Name, v.Namespace}
	case "apps/v1 DaemonSet":
		var v appsv1.DaemonSet
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec.Template.Spec, &metaRef{v.Name, v.Namespace}
	case "batch/v1 Job":
		var v batchv1.Job
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec.Template.Spec, &metaRef{v.Name, v.Namespace}
	case "batch/v1 CronJob":
		var v batchv1.CronJob
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec.JobTemplate.Spec.Template.Spec, &metaRef{v.Name, v.Namespace}
		specPath = "spec.jobTemplate.spec.template.spec"
	case "v1 Pod":
		var v corev1.Pod
		if err := strict(&v); err != nil {
			return err
		}
		o.PodSpec, meta = &v.Spec, &metaRef{v.Name, v.Namespace}
		specPath = "spec"
	case KEDAAPIVersion + " " + KindScaledJob:
		var v ScaledJob
		if err := strict(&v); err != nil {
			return err
		}
		if v.Spec.JobTargetRef == nil {
			return errors.New("ScaledJob has no spec.jobTargetRef")
		}
		o.ScaledJob, o.PodSpec, meta = &v, &v.Spec.JobTargetRef.Template.Spec, &metaRef{v.Name, v.Namespace}
		specPath = "spec.jobTargetRef.template.spec"
	case KEDAAPIVersion + " " + KindScaledObject:
		var v ScaledObject
		if err := strict(&v); err != nil {
			return err
		}
		o.ScaledObject, meta = &v, &metaRef{v.Name, v.Namespace}
	case RuntimeClassAPIVersion + " " + KindRuntimeClass:
		var v nodev1.RuntimeClass
		if err := strict(&v); err != nil {
			return err
		}
		o.RuntimeClass, meta = &v, &metaRef{v.Name, ""}
	case KarpenterAPIVersion + " " + KindNodePool:
		var v NodePool
		if err := strict(&v); err != nil {
			return err
		}
		o.NodePool, meta = &v, &metaRef{v.Name, ""}
		if err := checkGPUQuantity(js, []any{"spec", "limits"}, v.Spec.Limits); err != nil {
			return fmt.Errorf("%s: %w", Printable(id), err)
		}
		if err := checkNodePoolValues(&v); err != nil {
			return fmt.Errorf("%s: %w", Printable(id), err)
		}
	default:
		*skip = append(*skip, Skipped{Source: src, APIVersion: tm.APIVersion, Kind: tm.Kind, Name: tm.Metadata.Name})
		return nil
	}
	o.Name, o.Namespace = meta.name, meta.namespace
	if o.PodSpec != nil {
		if err := checkGPUQuantities(js, specPath, o.PodSpec); err != nil {
			return fmt.Errorf("%s: %w", Printable(o.ID()), err)
		}
	}
	*objs = append(*objs, o)
	return nil
}

// checkNodePoolValues refuses a NodePool whose
// spec.disruption.consolidateAfter Karpenter's CRD refuses
// (CheckConsolidateAfter: a negative or fractional duration), or whose
// karpenter.sh/capacity-type requirement (In or NotIn) names a value that
// is not a capacity type (CheckCapacityType): the CRD's schema lets such a
// value through, but no offering has it, so an In requirement never
// launches a node.
func checkNodePoolValues(np *NodePool) error {
	if d := np.Spec.Disruption; d != nil && d.ConsolidateAfter != "" {
		if err := CheckConsolidateAfter(d.ConsolidateAfter); err != nil {
			return fmt.Errorf("spec.disruption.%w", err)
		}
	}
	for i, r := range np.Spec.Template.Spec.Requirements {
		if r.Key != labelCapacityType || (r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn) {
			continue
		}
		for _, v := range r.Values {
			if err := CheckCapacityType(v); err != nil {
				return fmt.Errorf("spec.template.spec.requirements[%d]: %s", i, Printable(err.Error()))
			}
		}
	}
	return nil
}

// checkGPUQuantities refuses a pod spec whose containers ask for a negative
// or fractional nvidia.com/gpu: the API server refuses both (extended
// resources are whole numbers, k8s.io/kubernetes pkg/apis/core/validation
// ValidateResourceRequirements), so the manifest is malformed rather than
// "no GPU". js is the object's JSON (where the message finds the value as
// written) and specPath is where the kind keeps the pod spec, dotted.
func checkGPUQuantities(js []byte, specPath string, ps *corev1.PodSpec) error {
	var base []any
	for _, k := range strings.Split(specPath, ".") {
		base = append(base, k)
	}
	for _, cs := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", ps.InitContainers}, {"containers", ps.Containers}} {
		for i, ct := range cs.list {
			for _, rl := range []struct {
				field string
				list  corev1.ResourceList
			}{{"limits", ct.Resources.Limits}, {"requests", ct.Resources.Requests}} {
				at := append(append([]any{}, base...), cs.field, i, "resources", rl.field)
				if err := checkGPUQuantity(js, at, rl.list); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkGPUQuantity refuses a negative or fractional nvidia.com/gpu in rl;
// at is rl's path in the object's JSON js: keys (string) and list indexes
// (int). The message names the field and the value as the manifest wrote
// it ("1.5", not the parsed quantity's canonical "1500m").
func checkGPUQuantity(js []byte, at []any, rl corev1.ResourceList) error {
	q, ok := rl[GPUResource]
	if !ok {
		return nil
	}
	if _, whole := q.AsInt64(); q.Sign() >= 0 && whole {
		return nil
	}
	var field strings.Builder
	for _, k := range at {
		switch k := k.(type) {
		case int:
			fmt.Fprintf(&field, "[%d]", k)
		case string:
			if field.Len() > 0 {
				field.WriteByte('.')
			}
			field.WriteString(k)
		}
	}
	written, ok := rawValue(js, append(at, string(GPUResource)))
	if !ok {
		written = q.String() // not found as written: the parsed value
	}
	return fmt.Errorf("%s[%s]: %s: want a whole number of GPUs, 0 or more", field.String(), GPUResource, Printable(written))
}

// rawValue returns the scalar at path (keys and list indexes) in the JSON
// document js as written: a string's contents, or a number's digits
// ("1.5", "2e-1"). ok is false when path does not lead to a scalar.
func rawValue(js []byte, path []any) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return "", false
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k < 0 || k >= len(l) {
				return "", false
			}
			v = l[k]
		}
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}

// badQuantity finds the first value (in key order) of a "limits" or
// "requests" map anywhere in the JSON document js that
// resource.ParseQuantity refuses, and returns its field path
// ("spec.containers[0].resources.limits[nvidia.com/gpu]") and the value.
func badQuantity(js []byte) (field, value string, ok bool) {
	var v any
	if json.Unmarshal(js, &v) != nil {
		return "", "", false
	}
	var walk func(p string, v any) bool
	walk = func(p string, v any) bool {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				kp := k
				if p != "" {
					kp = p + "." + k
				}
				if m, isMap := t[k].(map[string]any); isMap && (k == "limits" || k == "requests") {
					names := make([]string, 0, len(m))
					for n := range m {
						names = append(names, n)
					}
					sort.Strings(names)
					for _, n := range names {
						s, isStr := m[n].(string)
						if !isStr {
							b, _ := json.Marshal(m[n]) // a value json.Unmarshal made
							s = string(b)
						}
						if _, err := resource.ParseQuantity(s); err != nil {
							field, value = fmt.Sprintf("%s[%s]", kp, Printable(n)), strconv.Quote(s)
							return true
						}
					}
				}
				if walk(kp, t[k]) {
					return true
				}
			}
		case []any:
			for i, x := range t {
				if walk(fmt.Sprintf("%s[%d]", p, i), x) {
					return true
				}
			}
		}
		return false
	}
	ok = walk("", v)
	return field, value, ok
}

type metaRef struct{ name, namespace string }

// ReadFS reads name from fsys: a file with Read, or a directory whose
// *.yaml, *.yml and *.json files (recursively, in lexical order) are each
// read with Read. The walk does not descend into hidden directories (a
// name starting with ".": .git, .github), whose files are not manifests to
// apply; hidden files in the directories it reads are read. Sources are named by their path. A symlink is followed.
// Only regular files are opened: name, or a manifest-named entry of the
// directory, that is a named pipe (whose open would block until a writer
// comes), a socket, a device other than the null device (which reads as
// empty), a dangling or looping symlink, or (for an
// entry) a directory is malformed input (fault.ErrMalformed), each named,
// and nothing is read. Other errors are Read's, or reading fsys (marked
// fault.ErrUnavailable).
func ReadFS(fsys fs.FS, name string) ([]Object, []Skipped, error) {
	return Reader{}.ReadFS(fsys, name)
}

// ReadFS is the package's ReadFS with rd's recognisers.
func (rd Reader) ReadFS(fsys fs.FS, name string) ([]Object, []Skipped, error) {
	if rd.budget == nil { // one for all the files
		rd.budget = yamlbound.NewBudget(yamlbound.MaxClusterDocument)
	}
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, nil, fault.Unavailable(fmt.Errorf("reading manifests %q: %w", rd.display(name), rd.pathErr(err)))
	}
	var files []string
	if !st.IsDir() {
		if !st.Mode().IsRegular() && !isDevNull(st) {
			return nil, nil, fault.Malformed(fmt.Errorf("reading manifests %q: it is %s, not a regular file", rd.display(name), bounded.DescribeMode(st.Mode())))
		}
		files = []string{name}
	} else {
		var notRead []string
		err := fs.WalkDir(fsys, name, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == name {
				return nil
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir // .git, .github, an editor's state: not manifests
			}
			switch path.Ext(p) {
			case ".yaml", ".yml", ".json":
			default:
				return nil
			}
			switch {
			case d.Type().IsRegular():
				files = append(files, p)
			case d.IsDir():
				notRead = append(notRead, fmt.Sprintf("%q is a directory", rd.display(p)))
			case d.Type()&fs.ModeSymlink != 0:
				st, err := fs.Stat(fsys, p)
				switch {
				case err != nil:
					notRead = append(notRead, fmt.Sprintf("%q is a symlink that does not resolve (%v)", rd.display(p), errors.Unwrap(err)))
				case st.Mode().IsRegular():
					files = append(files, p)
				default:
					notRead = append(notRead, fmt.Sprintf("%q is a symlink to %s", rd.display(p), bounded.DescribeMode(st.Mode())))
				}
			default:
				notRead = append(notRead, fmt.Sprintf("%q is %s", rd.display(p), bounded.DescribeMode(d.Type())))
			}
			return nil
		})
		if err != nil {
			return nil, nil, fault.Unavailable(fmt.Errorf("reading manifests %q: %w", rd.display(name), rd.pathErr(err)))
		}
		if len(notRead) > 0 {
			return nil, nil, fault.Malformed(fmt.Errorf("reading manifests %q: not regular files, not read: %s", rd.display(name), strings.Join(notRead, "; ")))
		}
	}
	var (
		objs []Object
		skip []Skipped
	)
	for _, f := range files {
		// The size first: a file over the limit is refused before any of
		// it is read (a 200 MB file would otherwise be read up to the
		// limit first).
		if st, err := fs.Stat(fsys, f); err == nil && st.Mode().IsRegular() && st.Size() > bounded.MaxClusterManifests {
			return nil, nil, fault.Malformed(fmt.Errorf("reading manifest %q: %d bytes, more than the %d MiB nodeprep reads: %w", rd.display(f), st.Size(), bounded.MaxClusterManifests>>20, bounded.ErrTooLarge))
		}
		fh, err := fsys.Open(f)
		if err != nil {
			return nil, nil, fault.Unavailable(fmt.Errorf("reading manifest %q: %w", rd.display(f), rd.pathErr(err)))
		}
		o, s, err := rd.Read(f, fh)
		fh.Close()
		if err != nil {
			return nil, nil, err
		}
		objs, skip = append(objs, o...), append(skip, s...)
	}
	return objs, skip, nil
}

// isDevNull reports whether st is the null device (os.DevNull), which
// reads as empty and never blocks: `check /dev/null` checks nothing.
func isDevNull(st fs.FileInfo) bool {
	null, err := os.Stat(os.DevNull)
	return err == nil && st.Mode()&fs.ModeCharDevice != 0 && os.SameFile(st, null)
}
