package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// Placeholder starts every value render cannot know (the node class, the
// Prometheus address, the image): a user replaces each before applying.
// Rendered lines holding one end with the comment "# placeholder".
const Placeholder = "REPLACE_ME"

// NodeClassRef names the cloud provider's node class for the NodePool.
type NodeClassRef struct {
	Group, Kind, Name string
}

// RenderOptions are render's inputs: the pool from nodeprep's config and
// the cluster-side choices. Zero values take the defaults in Render's doc.
type RenderOptions struct {
	Pool Pool
	// GFD enables GPU Feature Discovery in the device plugin chart; turn it
	// off when nodeprep writes GFD's labels itself (join.gfdLabels).
	GFD bool
	// Name names the Job, ScaledJob ("<Name>-fallback") and NodePool
	// ("<Name>-fallback"); default "nodeprep-gpu".
	Name string
	// Namespace of the Job and ScaledJob; default "default".
	Namespace string
	// Image is the workload's container image; default a placeholder.
	Image string
	// GPUsPerJob is nvidia.com/gpu per pod; default 1.
	GPUsPerJob int
	// MaxGPUs caps the fallback: the NodePool's nvidia.com/gpu limit and
	// the ScaledJob's maxReplicaCount (MaxGPUs / GPUsPerJob); default 4.
	MaxGPUs int
	// FallbackInstanceTypes are the NodePool's node.kubernetes.io/instance-type
	// values; none gives a placeholder.
	FallbackInstanceTypes []string
	// CapacityTypes are karpenter.sh/capacity-type values; default on-demand.
	CapacityTypes []string
	// NodeClass is the NodePool's nodeClassRef; unset fields are placeholders.
	NodeClass NodeClassRef
	// PrometheusAddress is the KEDA trigger's serverAddress; default a placeholder.
	PrometheusAddress string
	// ScrapeJob is the Prometheus job label of the scrape job that reads
	// this pool's nodes' metrics (node_exporter's textfile collector): the
	// health trigger counts only that job's nodes, so another pool's ready
	// nodes cannot hide this pool's outage. Default a placeholder.
	ScrapeJob string
	// QueueName is the RabbitMQ queue the work waits in; default a
	// placeholder.
	QueueName string
	// QueueHost is the RabbitMQ scaler's host (amqp:// or amqps:// URL);
	// default a placeholder.
	QueueHost string
	// QueueMetric is the Prometheus metric of the queue's ready messages,
	// matched on queue="<QueueName>"; default rabbitmq_queue_messages_ready
	// (RabbitMQ's rabbitmq_prometheus plugin, per-object metrics).
	QueueMetric string
	// QueueBacklog is the queue trigger's activationValue: the messages
	// waiting that the pool is left to absorb before the cloud tier starts
	// Jobs while the pool is up; default 10. Negative is an error.
	QueueBacklog int
	// HealthInterval is how often `nodeprep health` runs on the nodes
	// (services.nodeprep.health.interval); a node whose last run is older
	// than three intervals counts as not ready. Zero takes the default,
	// 5m; negative is an error.
	HealthInterval time.Duration
	// ConsolidateAfter is the NodePool's disruption.consolidateAfter,
	// written in whole seconds, minutes and hours; nil takes the default,
	// 5m. Zero is Karpenter's "0s" (remove an empty node at once) and is
	// rendered as such; negative is an error.
	ConsolidateAfter *time.Duration
}

// Document is one rendered file.
type Document struct {
	File string // file name under --out ("nodepool.yaml")
	Data []byte // YAML, starting with a comment that says what it is
}

func (o *RenderOptions) defaults() {
	if o.Name == "" {
		o.Name = "nodeprep-gpu"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Image == "" {
		o.Image = Placeholder + "/your-gpu-image:tag"
	}
	if o.GPUsPerJob <= 0 {
		o.GPUsPerJob = 1
	}
	if o.MaxGPUs <= 0 {
		o.MaxGPUs = 4
	}
	if len(o.FallbackInstanceTypes) == 0 {
		o.FallbackInstanceTypes = []string{Placeholder + "-gpu-instance-type"}
	}
	if len(o.CapacityTypes) == 0 {
		o.CapacityTypes = []string{"on-demand"}
	}
	if o.NodeClass.Group == "" {
		o.NodeClass.Group = Placeholder + ".node-class.group"
	}
	if o.NodeClass.Kind == "" {
		o.NodeClass.Kind = Placeholder + "NodeClassKind"
	}
	if o.NodeClass.Name == "" {
		o.NodeClass.Name = Placeholder + "-node-class"
	}
	if o.PrometheusAddress == "" {
		o.PrometheusAddress = "http://" + Placeholder + "-prometheus.monitoring.svc:9090"
	}
	if o.ScrapeJob == "" {
		o.ScrapeJob = Placeholder + "-pool-scrape-job"
	}
	if o.QueueName == "" {
		o.QueueName = Placeholder + "-queue"
	}
	if o.QueueHost == "" {
		o.QueueHost = "amqp://" + Placeholder + "-rabbitmq.queues.svc:5672/"
	}
	if o.QueueMetric == "" {
		o.QueueMetric = DefaultQueueMetric
	}
	if o.QueueBacklog == 0 {
		o.QueueBacklog = 10
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = 5 * time.Minute
	}
	if o.ConsolidateAfter == nil {
		d := 5 * time.Minute
		o.ConsolidateAfter = &d
	}
}

// Render returns the cluster half of the node contract, one Document each:
// the device plugin chart's values (device-plugin-values.yaml), the
// RuntimeClass they and the workloads name (runtimeclass.yaml,
// PatchedRuntimeClassObject), an example
// Job with the workload snippet in its header (job.yaml), a KEDA ScaledJob
// for the cloud tier (scaledjob.yaml) and a Karpenter NodePool for the
// fallback (nodepool.yaml). All select the pool label and tolerate every
// pool taint; the fallback's nodes carry the same label and taints. It
// needs a pool label (Pool.Label): without one the error is marked
// fault.ErrUsage. A value its Check function refuses (CheckName,
// CheckNamespace, CheckImage, CheckInstanceType, CheckCapacityType,
// CheckPrometheusAddress), a negative HealthInterval or ConsolidateAfter,
// or a ConsolidateAfter or HealthInterval that is not whole seconds, is an
// error marked fault.ErrMalformed (callers check them first to name the
// flag or key).
func Render(opts RenderOptions) ([]Document, error) {
	opts.defaults()
	p := opts.Pool
	if p.Label.Key == "" {
		return nil, fault.Usage(fmt.Errorf("rendering the cluster manifests: %w", ErrNoPoolLabel))
	}
	for _, check := range []func() error{
		func() error { return CheckName(opts.Name) },
		func() error { return CheckNamespace(opts.Namespace) },
		func() error { return CheckImage(opts.Image) },
		func() error { return CheckDuration("health interval", opts.HealthInterval, false) },
		func() error { return CheckDuration("consolidateAfter", *opts.ConsolidateAfter, true) },
	} {
		if err := check(); err != nil {
			return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: %w", err))
		}
	}
	for _, ct := range opts.CapacityTypes {
		if err := CheckCapacityType(ct); err != nil {
			return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: %w", err))
		}
	}
	for _, it := range opts.FallbackInstanceTypes {
		if err := CheckInstanceType(it); err != nil {
			return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: fallback %w", err))
		}
	}
	for _, check := range []func() error{
		func() error { return CheckScrapeJob(opts.ScrapeJob) },
		func() error { return CheckQueueName(opts.QueueName) },
		func() error { return CheckQueueHost(opts.QueueHost) },
		func() error { return CheckQueueMetric(opts.QueueMetric) },
	} {
		if err := check(); err != nil {
			return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: %w", err))
		}
	}
	if opts.QueueBacklog < 0 {
		return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: queue backlog %d is negative", opts.QueueBacklog))
	}
	if err := CheckPrometheusAddress(opts.PrometheusAddress); err != nil {
		return nil, fault.Malformed(fmt.Errorf("rendering the cluster manifests: Prometheus address %w", err))
	}
	if opts.MaxGPUs < opts.GPUsPerJob {
		return nil, fault.Usage(fmt.Errorf("rendering the cluster manifests: --max-gpus %d is less than --gpus-per-job %d", opts.MaxGPUs, opts.GPUsPerJob))
	}
	var tols []corev1.Toleration
	var taintList []string
	for _, t := range p.Taints {
		tols = append(tols, Toleration(t))
		taintList = append(taintList, t.String())
	}
	selector := map[string]string{p.Label.Key: p.Label.Value}
	// GPU workloads also require nodeprep's health label (gpuready.go).
	workSelector := map[string]string{p.Label.Key: p.Label.Value, LabelGPUReady: "true"}
	npName := opts.Name + "-fallback"

	var docs []Document
	add := func(file, header string, v any) error {
		data, err := encode(v)
		if err != nil {
			return fmt.Errorf("rendering %s: %w", file, err)
		}
		docs = append(docs, Document{File: file, Data: append([]byte(comment(header)), markPlaceholders(data)...)})
		return nil
	}

	// The device plugin chart's values.
	listStrategy, idStrategy := ListStrategyEnvvar, IDStrategyUUID
	if len(p.DeviceNames) > 0 && !containsString(p.DeviceNames, IDStrategyUUID) {
		idStrategy = IDStrategyIndex
	}
	driverRoot := p.DriverRoot
	if driverRoot == "" {
		driverRoot = "/"
	}
	runtimeClass := PatchedRuntimeClass
	gfd := opts.GFD
	pluginTols := append([]corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}}, tols...)
	values := DevicePluginValues{
		DeviceListStrategy: &listStrategy,
		DeviceIDStrategy:   &idStrategy,
		NvidiaDriverRoot:   &driverRoot,
		RuntimeClassName:   &runtimeClass,
		NodeSelector:       selector,
		Affinity:           poolAffinity(p.Label),
		Tolerations:        pluginTols,
		GFD:                &GFDValues{Enabled: &gfd},
	}
	if err := add("device-plugin-values.yaml", fmt.Sprintf(`Helm values for the NVIDIA device plugin (chart nvidia-device-plugin), from nodeprep's config.
helm upgrade -i nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin --create-namespace -f device-plugin-values.yaml
Not a Kubernetes object: do not kubectl apply it.
- nodeSelector and affinity pin the plugin to the pool label %s (the affinity replaces the
  chart's default, which wants Node Feature Discovery's labels).
- tolerations: every pool taint (%s).
- deviceListStrategy envvar with runtimeClassName nvidia-cdi: nvidia-container-runtime.cdi resolves
  NVIDIA_VISIBLE_DEVICES=GPU-<uuid> as nvidia.com/gpu=GPU-<uuid> from nodeprep's patched CDI spec
  (the plain nvidia class's mode auto gives jit-cdi or legacy, which never read it; the cdi-*
  strategies give pods the plugin's own spec, which it rewrites without Vulkan/EGL when it starts).
  Not where the nodes' NVIDIA runtime config sets accept-nvidia-visible-devices-envvar-when-unprivileged
  = false (nodeprep cdi check: nvidia-runtime-envvar-refused): the runtime then ignores the variable
  in unprivileged pods, which get no GPU; use cdi-cri there, or remove the key.
- deviceIDStrategy %s: the device names cdi.deviceNames makes the spec serve.
- nvidiaDriverRoot %s: cdi.driverRoot.
- gfd.enabled %t: GPU Feature Discovery is off when nodeprep writes GFD's labels (join.gfdLabels).`,
		p.Label, strings.Join(taintList, ", "), idStrategy, driverRoot, gfd), values); err != nil {
		return nil, err
	}

	// The RuntimeClass every rendered pod names: k3s does not create it.
	if err := add("runtimeclass.yaml", fmt.Sprintf(`The RuntimeClass %[1]s that the device plugin and the GPU workloads name: k3s registers the
containerd handler %[1]s on a node where it finds nvidia-container-runtime.cdi, but its own
RuntimeClasses (manifests/runtimes.yaml) are nvidia, nvidia-experimental, crun and the wasm
shims; without this one the API server refuses every pod that names it.
No scheduling: the class is cluster-wide and shared by every GPU pool; the pods select the pool
and tolerate its taints themselves.`, PatchedRuntimeClass), PatchedRuntimeClassObject()); err != nil {
		return nil, err
	}

	// The example Job: on-prem first, the fallback when the pool is full or down.
	podSpec := func(preferOnPrem bool) corev1.PodSpec {
		ps := corev1.PodSpec{
			RestartPolicy:    corev1.RestartPolicyNever,
			RuntimeClassName: &runtimeClass,
			NodeSelector:     workSelector,
			Tolerations:      tols,
			Containers: []corev1.Container{{
				Name:  "gpu",
				Image: opts.Image,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					GPUResource: *resource.NewQuantity(int64(opts.GPUsPerJob), resource.DecimalSI),
				}},
			}},
		}
		if preferOnPrem {
			// On-prem first: prefer nodes that are not the fallback
			// NodePool's. NotIn, not DoesNotExist: Karpenter ignores a pod
			// with any requirement, preferred ones included, of
			// karpenter.sh/nodepool DoesNotExist ("configured to not run on
			// a Karpenter provisioned node", sigs.k8s.io/karpenter
			// pkg/controllers/provisioning/provisioner.go,
			// validateKarpenterManagedLabelCanExist), so it would never
			// launch a node for it. NotIn matches the on-prem nodes (no
			// such label) alike, and Karpenter drops the preference when
			// only the fallback can take the pod.
			ps.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 100,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: labelNodePool, Operator: corev1.NodeSelectorOpNotIn, Values: []string{npName}},
					}},
				}},
			}}
		}
		return ps
	}
	backoff := int32(2)
	job := batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Namespace: opts.Namespace},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template:     corev1.PodTemplateSpec{Spec: podSpec(true)},
		},
	}
	snippet, err := encode(map[string]any{"spec": map[string]any{
		"runtimeClassName": runtimeClass, "nodeSelector": workSelector, "tolerations": tols, "affinity": job.Spec.Template.Spec.Affinity,
	}})
	if err != nil {
		return nil, fmt.Errorf("rendering the workload snippet: %w", err)
	}
	if err := add("job.yaml", `An example GPU Job: on-prem first, the fallback NodePool when the pool is full or down.
The workload snippet: put these fields in any GPU pod template:
`+indent(string(snippet), "  ")+`  and request nvidia.com/gpu in the container's resources.limits.
runtimeClassName nvidia-cdi: k3s registers the nvidia-cdi handler when it finds
nvidia-container-runtime.cdi; it runs the NVIDIA runtime in cdi mode, so the pod gets the spec
nodeprep patched and proved. runtimeclass.yaml is its RuntimeClass; the fallback's nodes need
a handler of that name too.`, job); err != nil {
		return nil, err
	}

	// The cloud tier: KEDA starts Jobs on the fallback for the backlog, or
	// while work waits and no pool node is ready (docs/cluster.md, "The two
	// triggers").
	maxReplicas := int32(opts.MaxGPUs / opts.GPUsPerJob)
	poll := int32(30)
	cloud := podSpec(false)
	cloud.NodeSelector = map[string]string{p.Label.Key: p.Label.Value, LabelGPUReady: "true", labelNodePool: npName}
	stale := int64((3 * opts.HealthInterval).Seconds())
	sj := ScaledJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: KEDAAPIVersion, Kind: KindScaledJob},
		ObjectMeta: metav1.ObjectMeta{Name: npName, Namespace: opts.Namespace},
		Spec: ScaledJobSpec{
			JobTargetRef:    &batchv1.JobSpec{BackoffLimit: &backoff, Template: corev1.PodTemplateSpec{Spec: cloud}},
			PollingInterval: &poll,
			MaxReplicaCount: &maxReplicas,
			ScalingStrategy: &ScalingStrategy{MultipleScalersCalculation: "max"},
			Triggers: []ScaleTrigger{{
				Type: "rabbitmq",
				Name: TriggerBacklog,
				Metadata: map[string]string{
					"host":            opts.QueueHost,
					"protocol":        "amqp",
					"queueName":       opts.QueueName,
					"mode":            "QueueLength",
					"value":           "1",
					"activationValue": fmt.Sprint(opts.QueueBacklog),
				},
			}, {
				Type: "prometheus",
				Name: TriggerPoolDown,
				Metadata: map[string]string{
					"serverAddress":       opts.PrometheusAddress,
					"query":               PoolDownQuery(opts.ScrapeJob, opts.QueueMetric, opts.QueueName, stale),
					"threshold":           "1",
					"activationThreshold": "0",
				},
			}},
		},
	}
	if err := add("scaledjob.yaml", fmt.Sprintf(`The cloud tier: a KEDA ScaledJob whose Jobs run on the fallback NodePool %s, one
message each, at most %d at once (maxReplicaCount, the spend cap). Two triggers, and KEDA
starts as many Jobs as the larger asks (multipleScalersCalculation max):
- %s (RabbitMQ queue %s): the queue length, once more than %d messages wait (the
  backlog the pool is left to absorb);
- %s (Prometheus): the queue's ready messages (%s{queue=...}), but only while no node of
  the scrape job %s has %s 1 from a nodeprep run younger than %s (3 health intervals);
  0 otherwise. Without work waiting it is 0 however broken the pool is.
node_exporter's textfile collector exports nodeprep's metrics from the nodes; RabbitMQ's
rabbitmq_prometheus plugin (per-object metrics) exports the queue's.`,
		npName, maxReplicas, TriggerBacklog, opts.QueueName, opts.QueueBacklog, TriggerPoolDown, opts.QueueMetric, opts.ScrapeJob, MetricReady, shortDuration(3*opts.HealthInterval)), sj); err != nil {
		return nil, err
	}

	// The fallback NodePool.
	var taints []corev1.Taint
	for _, t := range p.Taints {
		taints = append(taints, KubeTaint(t))
	}
	arch := p.Arch
	if arch == "" {
		arch = "amd64"
	}
	weight := int32(10)
	np := NodePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: KarpenterAPIVersion, Kind: KindNodePool},
		ObjectMeta: metav1.ObjectMeta{Name: npName},
		Spec: NodePoolSpec{
			Template: NodeClaimTemplate{
				Metadata: TemplateMeta{Labels: map[string]string{p.Label.Key: p.Label.Value, LabelGPUReady: "true"}},
				Spec: NodeClaimTemplateSpec{
					Taints: taints,
					Requirements: []NodeRequirement{
						{Key: "node.kubernetes.io/instance-type", Operator: corev1.NodeSelectorOpIn, Values: opts.FallbackInstanceTypes},
						{Key: labelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: opts.CapacityTypes},
						{Key: labelArch, Operator: corev1.NodeSelectorOpIn, Values: []string{arch}},
						{Key: labelOS, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
					},
					NodeClassRef: &NodeClassReference{Group: opts.NodeClass.Group, Kind: opts.NodeClass.Kind, Name: opts.NodeClass.Name},
				},
			},
			Disruption: &Disruption{ConsolidationPolicy: "WhenEmpty", ConsolidateAfter: shortDuration(*opts.ConsolidateAfter)},
			Limits:     corev1.ResourceList{GPUResource: *resource.NewQuantity(int64(opts.MaxGPUs), resource.DecimalSI)},
			Weight:     &weight,
		},
	}
	if err := add("nodepool.yaml", fmt.Sprintf(`The fallback: a Karpenter NodePool with the pool's label %s and taints (%s).
No replicas: zero nodes until a pending pod needs one; consolidationPolicy WhenEmpty removes
a node %s its last Job ends (running Jobs are not disrupted). limits caps nvidia.com/gpu at %d.
nodeClassRef and the instance types are your cloud's: replace the placeholders.`,
		p.Label, strings.Join(taintList, ", "), afterLastJob(*opts.ConsolidateAfter), opts.MaxGPUs), np); err != nil {
		return nil, err
	}
	return docs, nil
}

func poolAffinity(l k3s.Label) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: l.Key, Operator: corev1.NodeSelectorOpIn, Values: []string{l.Value}}},
		}}},
	}}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// encode writes v as block YAML through its JSON form (so the API types'
// json tags decide the keys), without the empty status and null
// creationTimestamp fields the API types always emit.
func encode(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	prune(m)
	return yaml.Marshal(m)
}

func prune(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			switch {
			case k == "creationTimestamp" && x == nil:
				delete(t, k)
			case k == "status" || k == "resources" || k == "metadata" || k == "template" || k == "spec":
				prune(x)
				if m, ok := x.(map[string]any); ok && len(m) == 0 {
					delete(t, k)
				}
			default:
				prune(x)
			}
		}
	case []any:
		for _, x := range t {
			prune(x)
		}
	}
}

func comment(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + line + "\n")
	}
	return b.String()
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

// markPlaceholders ends every scalar that holds a Placeholder with a
// comment. A long scalar the encoder folded over several lines gets the
// comment after its last line: a comment inside a plain scalar would end
// it there and break the document.
func markPlaceholders(data []byte) []byte {
	lines := bytes.Split(data, []byte("\n"))
	mark := map[int]bool{}
	for i := 0; i < len(lines); i++ {
		if !bytes.Contains(lines[i], []byte(Placeholder)) {
			continue
		}
		// The key's column: past the indentation and any "- " of a list item.
		key := len(lines[i]) - len(bytes.TrimLeft(lines[i], " "))
		for bytes.HasPrefix(lines[i][key:], []byte("- ")) {
			key += 2
		}
		end := i
		for end+1 < len(lines) {
			next := lines[end+1]
			if len(bytes.TrimSpace(next)) == 0 || len(next)-len(bytes.TrimLeft(next, " ")) <= key {
				break
			}
			end++
		}
		mark[end] = true
		i = end
	}
	for i := range lines {
		if mark[i] {
			lines[i] = append(lines[i], []byte("  # placeholder: your value")...)
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// Join concatenates documents into one multi-document YAML stream.
func Join(docs []Document) []byte {
	var b bytes.Buffer
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(d.Data)
	}
	return b.Bytes()
}

// JSONList returns docs as one indented JSON array, a document per item in
// their order (the comments are YAML's and do not carry over; placeholder
// values still start with Placeholder). Read reads the array back. The
// error is converting a document, which Render's own output never fails.
func JSONList(docs []Document) ([]byte, error) {
	items := make([]json.RawMessage, 0, len(docs))
	for _, d := range docs {
		js, err := yaml.YAMLToJSON(d.Data)
		if err != nil {
			return nil, fmt.Errorf("converting %s to JSON: %w", d.File, err)
		}
		items = append(items, js)
	}
	out, err := json.MarshalIndent(items, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// shortDuration writes d as Go does without zero units: 5m, 1h30m, 45s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// afterLastJob says when the NodePool removes an empty node, for its
// header: "5m after", or "as soon as" for consolidateAfter 0s.
func afterLastJob(d time.Duration) string {
	if d == 0 {
		return "as soon as"
	}
	return shortDuration(d) + " after"
}
