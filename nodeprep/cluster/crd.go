package cluster

import (
	"encoding/json"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// API versions and kinds of the custom resources the package reads and
// renders.
const (
	KEDAAPIVersion      = "keda.sh/v1alpha1" // KEDA's ScaledJob and ScaledObject
	KarpenterAPIVersion = "karpenter.sh/v1"  // Karpenter's NodePool
	KindScaledJob       = "ScaledJob"
	KindScaledObject    = "ScaledObject"
	KindNodePool        = "NodePool"
)

// ScaledJob is KEDA's ScaledJob (keda.sh/v1alpha1): its fields as
// kedacore/keda apis/keda/v1alpha1/scaledjob_types.go declares them, status
// left out (a manifest does not carry it).
type ScaledJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledJobSpec `json:"spec"`
}

// ScaledJobSpec is ScaledJob's spec (scaledjob_types.go ScaledJobSpec).
type ScaledJobSpec struct {
	// JobTargetRef is the spec of the Jobs KEDA creates.
	JobTargetRef               *batchv1.JobSpec `json:"jobTargetRef"`
	PollingInterval            *int32           `json:"pollingInterval,omitempty"`            // seconds between trigger polls
	SuccessfulJobsHistoryLimit *int32           `json:"successfulJobsHistoryLimit,omitempty"` // finished Jobs kept
	FailedJobsHistoryLimit     *int32           `json:"failedJobsHistoryLimit,omitempty"`     // failed Jobs kept
	RolloutStrategy            string           `json:"rolloutStrategy,omitempty"`            // deprecated: Rollout.Strategy
	Rollout                    *Rollout         `json:"rollout,omitempty"`                    // what happens to running Jobs on an update
	EnvSourceContainerName     string           `json:"envSourceContainerName,omitempty"`     // container whose env the scalers read
	MinReplicaCount            *int32           `json:"minReplicaCount,omitempty"`            // Jobs kept even without work
	// MaxReplicaCount caps the Jobs running at once: the cloud tier's spend cap.
	MaxReplicaCount *int32           `json:"maxReplicaCount,omitempty"`
	ScalingStrategy *ScalingStrategy `json:"scalingStrategy,omitempty"` // how trigger values become Jobs
	Triggers        []ScaleTrigger   `json:"triggers"`                  // at least one
}

// Rollout is ScaledJob's spec.rollout (scaledjob_types.go Rollout).
type Rollout struct {
	Strategy          string `json:"strategy,omitempty"`          // gradual or immediate
	PropagationPolicy string `json:"propagationPolicy,omitempty"` // foreground or background
}

// ScalingStrategy is ScaledJob's spec.scalingStrategy (scaledjob_types.go).
type ScalingStrategy struct {
	Strategy                          string   `json:"strategy,omitempty"` // default, custom, accurate or eager
	CustomScalingQueueLengthDeduction *int32   `json:"customScalingQueueLengthDeduction,omitempty"`
	CustomScalingRunningJobPercentage string   `json:"customScalingRunningJobPercentage,omitempty"`
	PendingPodConditions              []string `json:"pendingPodConditions,omitempty"`
	// MultipleScalersCalculation combines several triggers: min, avg, sum or max.
	MultipleScalersCalculation string `json:"multipleScalersCalculation,omitempty"`
}

// ScaleTrigger is one KEDA trigger (scaletriggers_types.go ScaleTriggers).
// For type "prometheus" the metadata holds serverAddress, query and
// threshold (KEDA docs, scalers/prometheus).
type ScaleTrigger struct {
	Type              string             `json:"type"`
	Name              string             `json:"name,omitempty"`
	UseCachedMetrics  bool               `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string  `json:"metadata"`
	AuthenticationRef *AuthenticationRef `json:"authenticationRef,omitempty"`
	// MetricType is an autoscaling/v2 MetricTargetType (AverageValue,
	// Value, Utilization), kept a string so that the autoscaling API
	// package's init does not run in every nodeprep command.
	MetricType string `json:"metricType,omitempty"`
}

// AuthenticationRef names a (Cluster)TriggerAuthentication.
type AuthenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// ScaledObject is KEDA's ScaledObject (keda.sh/v1alpha1,
// scaledobject_types.go), status left out. Only its triggers are judged;
// the workload it scales is judged as itself.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is ScaledObject's spec.
type ScaledObjectSpec struct {
	ScaleTargetRef        *ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32          `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32          `json:"maxReplicaCount,omitempty"`
	Advanced              json.RawMessage `json:"advanced,omitempty"` // not judged
	Triggers              []ScaleTrigger  `json:"triggers"`
	Fallback              *ScaledFallback `json:"fallback,omitempty"`
}

// ScaleTarget is ScaledObject's spec.scaleTargetRef.
type ScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

// ScaledFallback is ScaledObject's spec.fallback.
type ScaledFallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

// NodePool is Karpenter's NodePool (karpenter.sh/v1): the fields
// kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go and nodeclaim.go
// declare, status left out.
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodePoolSpec `json:"spec"`
}

// NodePoolSpec is NodePool's spec.
type NodePoolSpec struct {
	Template   NodeClaimTemplate `json:"template"`
	Disruption *Disruption       `json:"disruption,omitempty"`
	// Limits cap the resources of all the pool's nodes together
	// (nvidia.com/gpu: the most GPUs the fallback may run).
	Limits   corev1.ResourceList `json:"limits,omitempty"`
	Weight   *int32              `json:"weight,omitempty"`
	Replicas *int64              `json:"replicas,omitempty"` // static pools only
}

// Disruption is NodePool's spec.disruption.
type Disruption struct {
	// ConsolidateAfter is a duration ("30s") or "Never".
	ConsolidateAfter string `json:"consolidateAfter,omitempty"`
	// ConsolidationPolicy is WhenEmpty, WhenEmptyOrUnderutilized or Balanced.
	ConsolidationPolicy string   `json:"consolidationPolicy,omitempty"`
	Budgets             []Budget `json:"budgets,omitempty"`
}

// Budget is one disruption budget.
type Budget struct {
	Reasons  []string `json:"reasons,omitempty"`
	Nodes    string   `json:"nodes"`
	Schedule *string  `json:"schedule,omitempty"`
	Duration string   `json:"duration,omitempty"`
}

// NodeClaimTemplate is NodePool's spec.template: the labels and spec every
// node of the pool gets.
type NodeClaimTemplate struct {
	Metadata TemplateMeta          `json:"metadata,omitempty"`
	Spec     NodeClaimTemplateSpec `json:"spec"`
}

// TemplateMeta is the template's metadata: labels and annotations only.
type TemplateMeta struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NodeClaimTemplateSpec is the template's spec. Taints are on the node for
// its life; StartupTaints are expected to be removed by a daemon and are
// not considered for scheduling (Karpenter docs, NodePools: startupTaints).
type NodeClaimTemplateSpec struct {
	Taints                 []corev1.Taint      `json:"taints,omitempty"`
	StartupTaints          []corev1.Taint      `json:"startupTaints,omitempty"`
	Requirements           []NodeRequirement   `json:"requirements"`
	NodeClassRef           *NodeClassReference `json:"nodeClassRef"`
	TerminationGracePeriod string              `json:"terminationGracePeriod,omitempty"`
	ExpireAfter            string              `json:"expireAfter,omitempty"` // duration or "Never"
}

// NodeRequirement is a node selector requirement with Karpenter's minValues
// (nodeclaim.go NodeSelectorRequirementWithMinValues).
type NodeRequirement struct {
	Key       string                      `json:"key"`
	Operator  corev1.NodeSelectorOperator `json:"operator,omitempty"`
	Values    []string                    `json:"values,omitempty"`
	MinValues *int                        `json:"minValues,omitempty"`
}

// NodeClassReference names the cloud provider's node class (on AWS an
// EC2NodeClass): the user's, never invented by render.
type NodeClassReference struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Group string `json:"group"`
}

// DevicePluginValues are the NVIDIA device plugin Helm chart's values
// (chart nvidia-device-plugin, NVIDIA/k8s-device-plugin
// deployments/helm/nvidia-device-plugin/values.yaml): every top-level key of
// the chart, so that a typo is an error; the keys nodeprep judges are typed,
// the rest are kept raw.
type DevicePluginValues struct {
	Config               json.RawMessage `json:"config,omitempty"`
	CompatWithCPUManager *bool           `json:"compatWithCPUManager,omitempty"`
	MigStrategy          *string         `json:"migStrategy,omitempty"`
	FailOnInitError      *bool           `json:"failOnInitError,omitempty"`
	// DeviceListStrategy is how the plugin hands devices to the runtime:
	// envvar, volume-mounts, cdi-annotations or cdi-cri (a comma list is
	// allowed).
	DeviceListStrategy *string `json:"deviceListStrategy,omitempty"`
	// DeviceIDStrategy is uuid or index: the name each device is passed by.
	DeviceIDStrategy *string `json:"deviceIDStrategy,omitempty"`
	// NvidiaDriverRoot is the host directory holding the driver.
	NvidiaDriverRoot        *string             `json:"nvidiaDriverRoot,omitempty"`
	GdrcopyEnabled          *bool               `json:"gdrcopyEnabled,omitempty"`
	GdsEnabled              *bool               `json:"gdsEnabled,omitempty"`
	MofedEnabled            *bool               `json:"mofedEnabled,omitempty"`
	DeviceDiscoveryStrategy *string             `json:"deviceDiscoveryStrategy,omitempty"`
	NameOverride            string              `json:"nameOverride,omitempty"`
	FullnameOverride        string              `json:"fullnameOverride,omitempty"`
	NamespaceOverride       string              `json:"namespaceOverride,omitempty"`
	SelectorLabelsOverride  map[string]string   `json:"selectorLabelsOverride,omitempty"`
	AllowDefaultNamespace   *bool               `json:"allowDefaultNamespace,omitempty"`
	ImagePullSecrets        json.RawMessage     `json:"imagePullSecrets,omitempty"`
	Image                   json.RawMessage     `json:"image,omitempty"`
	UpdateStrategy          json.RawMessage     `json:"updateStrategy,omitempty"`
	PodAnnotations          map[string]string   `json:"podAnnotations,omitempty"`
	PodSecurityContext      json.RawMessage     `json:"podSecurityContext,omitempty"`
	SecurityContext         json.RawMessage     `json:"securityContext,omitempty"`
	Resources               json.RawMessage     `json:"resources,omitempty"`
	NodeSelector            map[string]string   `json:"nodeSelector,omitempty"`
	Affinity                *corev1.Affinity    `json:"affinity,omitempty"`
	Tolerations             []corev1.Toleration `json:"tolerations,omitempty"`
	PriorityClassName       string              `json:"priorityClassName,omitempty"`
	RuntimeClassName        *string             `json:"runtimeClassName,omitempty"`
	DevicePlugin            json.RawMessage     `json:"devicePlugin,omitempty"`
	GFD                     *GFDValues          `json:"gfd,omitempty"`
	NFD                     json.RawMessage     `json:"nfd,omitempty"`
	MPS                     json.RawMessage     `json:"mps,omitempty"`
	CDI                     json.RawMessage     `json:"cdi,omitempty"`
}

// GFDValues is the chart's gfd: section (GPU Feature Discovery).
type GFDValues struct {
	Enabled           *bool           `json:"enabled,omitempty"`
	NameOverride      string          `json:"nameOverride,omitempty"`
	NamespaceOverride string          `json:"namespaceOverride,omitempty"`
	NoTimestamp       *bool           `json:"noTimestamp,omitempty"`
	SleepInterval     *string         `json:"sleepInterval,omitempty"`
	SecurityContext   json.RawMessage `json:"securityContext,omitempty"`
}
