// Package cluster is the cluster half of the node contract: it renders the
// manifests that must agree with what nodeprep's nodes register (the NVIDIA
// device plugin's Helm values, a GPU workload, a KEDA ScaledJob for the cloud
// tier, a Karpenter NodePool for the fallback) and checks a user's manifests
// against the same node contract with Kubernetes' own scheduling helpers
// (k8s.io/component-helpers/scheduling/corev1: toleration matching and
// required node affinity).
//
// Core workloads decode strictly into k8s.io/api types. KEDA's ScaledJob and
// ScaledObject, Karpenter's NodePool and the device plugin chart's values
// decode strictly into the small local types in crd.go: the projects' Go
// modules pull in controller-runtime, cloud SDKs or the whole chart
// machinery, far more than the handful of fields a check reads.
//
// The package never reads flags, the environment or a process's streams:
// callers pass a Pool (what the nodes register) and bytes.
package cluster
