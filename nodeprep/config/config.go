package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/cdi"

	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// DefaultPath is the host path of the config file read when --config
// is not given. A missing default file means defaults.
const DefaultPath = "/etc/nodeprep/config.yaml"

// MaxWait is the longest wait for another nodeprep's lock that the
// config's wait and --wait may ask for: an up run takes seconds (its
// self-test at most selftest.timeout), so a wait of more than an hour is a
// typo that would leave a boot or a re-patch hanging.
const MaxWait = time.Hour

// ShortDuration is d as time.Duration.String writes it, without the zero
// minutes and seconds it ends in ("1h", "1h30m", "10s"): the way a bound is
// written in a message, as it would be typed.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Config is the config file (/etc/nodeprep/config.yaml): YAML, unknown keys
// rejected. Every field has a command-line flag that overrides it; the
// README's "Config file" section lists both. The zero value of a field
// means "use the default" (see Default).
type Config struct {
	CDI      CDIConfig      `yaml:"cdi" json:"cdi"`           // the `cdi:` section
	NVML     NVMLConfig     `yaml:"nvml" json:"nvml"`         // the `nvml:` section
	Join     JoinConfig     `yaml:"join" json:"join"`         // the `join:` section
	Selftest SelftestConfig `yaml:"selftest" json:"selftest"` // the `selftest:` section
	Up       UpConfig       `yaml:"up" json:"up"`             // the `up:` section
	Cluster  ClusterConfig  `yaml:"cluster" json:"cluster"`   // the `cluster:` section (cluster render/check)
	// Wait is how long to wait for another nodeprep's lock, 0 to MaxWait
	// (0 or absent: the command's default, which is to fail at once for
	// all but cdi watch, whose passes wait 30 s).
	Wait time.Duration `yaml:"wait" json:"wait"`
}

// CDIConfig is the `cdi:` section: which spec to patch and what to add.
type CDIConfig struct {
	// Spec is the host path of the generated CDI spec.
	Spec string `yaml:"spec" json:"spec"`
	// SpecDirs are the container runtime's CDI spec directories (host
	// paths, lowest priority first), as containerd's cdi_spec_dirs lists
	// them: every GPU spec in them is checked and patched. Empty means
	// /etc/cdi and /var/run/cdi.
	SpecDirs []string `yaml:"specDirs" json:"specDirs"`
	// DriverRoot is the host directory holding the driver's graphics files
	// (NixOS: /run/opengl-driver).
	DriverRoot string `yaml:"driverRoot" json:"driverRoot"`
	// GlvndDirs are the host directories searched for the glvnd dispatch
	// libraries; empty means <driverRoot>/lib.
	GlvndDirs []string `yaml:"glvndDirs" json:"glvndDirs"`
	// DeviceNames are the device-name strategies the spec must serve for
	// each GPU: "uuid" (GPU-<uuid>, what the k8s device plugin asks for)
	// and/or "index".
	DeviceNames []string `yaml:"deviceNames" json:"deviceNames"`
	// ContainerPaths overrides where the graphics files appear in the
	// container.
	ContainerPaths cdi.ContainerPaths `yaml:"containerPaths" json:"containerPaths"`
}

// NVMLConfig is the `nvml:` section.
type NVMLConfig struct {
	// Library is the path of libnvidia-ml.so.1 to load; empty means the
	// dynamic linker's search.
	Library string `yaml:"library" json:"library"`
	// Timeout bounds nvmlInit and the inventory's queries, run in a child
	// process (0 or absent: gpu.DefaultTimeout, 5s); a driver that has
	// not answered by then is reported hung (exit 69).
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// JoinConfig is the `join:` section: the k3s agent drop-in.
type JoinConfig struct {
	// K3sConfig is the host path of k3s's config.yaml; drop-ins are read
	// from <K3sConfig>.d/.
	K3sConfig string `yaml:"k3sConfig" json:"k3sConfig"`
	// K3sDataDir is k3s's data-dir when no k3s file, argument or
	// K3S_DATA_DIR sets one ("" = /var/lib/rancher/k3s).
	K3sDataDir string `yaml:"k3sDataDir" json:"k3sDataDir"`
	// K3sEnvironmentFile is the host path of the k3s service's
	// EnvironmentFile, read for K3S_CONFIG_FILE and K3S_DATA_DIR ("" = none).
	K3sEnvironmentFile string `yaml:"k3sEnvironmentFile" json:"k3sEnvironmentFile"`
	// DropIn is the file name nodeprep writes in <K3sConfig>.d/.
	DropIn string `yaml:"dropIn" json:"dropIn"`
	// Labels are extra node labels, "key=value".
	Labels []string `yaml:"labels" json:"labels"`
	// Taints are extra taints, "key[=value]:Effect".
	Taints []string `yaml:"taints" json:"taints"`
	// DefaultTaint adds nvidia.com/gpu=present:NoSchedule (nil: true).
	DefaultTaint *bool `yaml:"defaultTaint" json:"defaultTaint"`
	// GFDLabels adds GPU Feature Discovery's labels (nil: true).
	GFDLabels *bool `yaml:"gfdLabels" json:"gfdLabels"`
	// MIGStrategy is GFD's MIG strategy for the MIG labels: none (the
	// default, as GFD's), single or mixed (see MIGLabels).
	MIGStrategy string `yaml:"migStrategy" json:"migStrategy"`
	// AllowOverride lets a later drop-in or k3s argument replace nodeprep's keys.
	AllowOverride bool `yaml:"allowOverride" json:"allowOverride"`
	// RequireUnregistered fails when the node has already registered.
	RequireUnregistered bool `yaml:"requireUnregistered" json:"requireUnregistered"`
	// K3sArgs are the k3s agent's command-line arguments ("--node-taint=...").
	K3sArgs []string `yaml:"k3sArgs" json:"k3sArgs"`
	// K3sUnitPath are the directories of the k3s service's PATH, in order
	// (the NixOS module sets them): before k3s has rendered its containerd
	// config, nodeprep predicts from them the NVIDIA runtime handlers k3s
	// will register, and a node where k3s would find none is not ready.
	K3sUnitPath []string `yaml:"k3sUnitPath" json:"k3sUnitPath"`
}

// SelftestConfig is the `selftest:` section.
type SelftestConfig struct {
	// VulkanLoader is the Vulkan loader to dlopen (default libvulkan.so.1).
	VulkanLoader string `yaml:"vulkanLoader" json:"vulkanLoader"`
	// EGLLib is the EGL library to dlopen (default libEGL.so.1).
	EGLLib string `yaml:"eglLib" json:"eglLib"`
	// Timeout bounds each probe (selftest.WithTimeout; 0 or absent: 30s).
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// RequireEGL makes an EGL failure fail the self-test (nil: true).
	RequireEGL *bool `yaml:"requireEGL" json:"requireEGL"`
	// CUDALib is the CUDA driver library the CUDA probe opens (default
	// libcuda.so.1; the NixOS module sets /run/opengl-driver/lib/libcuda.so.1).
	CUDALib string `yaml:"cudaLib" json:"cudaLib"`
	// RequireCUDA decides which CUDA failures fail the self-test
	// (selftest.WithCUDA): nil (the default) all of them, except a libcuda
	// that cannot be opened with --simulate; true all; false none.
	RequireCUDA *bool `yaml:"requireCUDA" json:"requireCUDA"`
	// AllowCPUAdapter lets a CPU adapter stand in for each simulated GPU
	// (only with --simulate).
	AllowCPUAdapter bool `yaml:"allowCPUAdapter" json:"allowCPUAdapter"`
	// Container also runs the probe inside an OCI container built from the
	// patched CDI spec.
	Container bool `yaml:"container" json:"container"`
	// OCIRuntime is the OCI runtime for the container self-test.
	OCIRuntime string `yaml:"ociRuntime" json:"ociRuntime"`
	// Rootfs is the root file system for the container self-test.
	Rootfs string `yaml:"rootfs" json:"rootfs"`
	// RequiredLimits are WebGPU limits (maxBufferSize: 4294967296, ...;
	// selftest.LimitNames) that the adapter of every GPU must offer as wgpu
	// reports them, so that a workload's requestDevice with them succeeds;
	// an adapter that falls short fails the self-test naming the limit.
	RequiredLimits map[string]uint64 `yaml:"requiredLimits" json:"requiredLimits,omitempty"`
	// RequiredFeatures are WebGPU features ("shader-f16", ...;
	// selftest.FeatureNames) the adapter of every GPU must offer.
	RequiredFeatures []string `yaml:"requiredFeatures" json:"requiredFeatures,omitempty"`
}

// Requirements returns the section's required limits and features.
func (s SelftestConfig) Requirements() selftest.Requirements {
	return selftest.Requirements{Limits: s.RequiredLimits, Features: s.RequiredFeatures}
}

// UpConfig is the `up:` section.
type UpConfig struct {
	// OnSelftestFailure is "block" (default) or "taint".
	OnSelftestFailure string `yaml:"onSelftestFailure" json:"onSelftestFailure"`
	// StatusFile is the host path of the status report.
	StatusFile string `yaml:"statusFile" json:"statusFile"`
	// MetricsFile is the path of the Prometheus textfile ("" = none).
	MetricsFile string `yaml:"metricsFile" json:"metricsFile"`
}

// ClusterConfig is the `cluster:` section: the cluster side that `nodeprep
// cluster render` writes and `cluster check` judges (docs/cluster.md).
type ClusterConfig struct {
	// PoolLabel is the label ("key=value") that selects the pool's nodes;
	// empty means the first of join.labels.
	PoolLabel string `yaml:"poolLabel" json:"poolLabel"`
	// FallbackInstanceTypes are the cloud instance types of the fallback
	// NodePool (node.kubernetes.io/instance-type).
	FallbackInstanceTypes []string `yaml:"fallbackInstanceTypes" json:"fallbackInstanceTypes"`
	// MaxGPUs caps the fallback: the NodePool's nvidia.com/gpu limit and the
	// ScaledJob's maxReplicaCount (0: 4).
	MaxGPUs int `yaml:"maxGPUs" json:"maxGPUs"`
	// NodeClass is the NodePool's nodeClassRef, "group/kind/name"
	// (karpenter.k8s.aws/EC2NodeClass/default); empty: a placeholder.
	NodeClass string `yaml:"nodeClass" json:"nodeClass"`
	// PrometheusAddress is the KEDA prometheus trigger's serverAddress;
	// empty: a placeholder.
	PrometheusAddress string `yaml:"prometheusAddress" json:"prometheusAddress"`
	// ScrapeJob is the Prometheus job label of the scrape job that reads
	// this pool's nodes' metrics: the health trigger selects the pool by
	// it. Empty: a placeholder.
	ScrapeJob string `yaml:"scrapeJob" json:"scrapeJob"`
	// QueueName is the RabbitMQ queue the cloud tier's work waits in.
	// Empty: a placeholder.
	QueueName string `yaml:"queueName" json:"queueName"`
	// QueueHost is the RabbitMQ scaler's host, an amqp:// or amqps:// URL
	// (KEDA docs, scalers/rabbitmq-queue). Empty: a placeholder.
	QueueHost string `yaml:"queueHost" json:"queueHost"`
}

// Default returns the defaults of every field. arch is the host
// architecture as GOARCH spells it ("amd64", "arm64"); it picks the
// multiarch library directory (cdi.DefaultContainerPaths).
func Default(arch string) Config {
	// One allocation per field: yaml.v3 decodes through a pointer that is
	// already set, so a shared *bool would let one key set all three.
	yes := func() *bool { b := true; return &b }
	return Config{
		CDI: CDIConfig{
			Spec:           cdi.DefaultSpecPath,
			DriverRoot:     "/run/opengl-driver",
			DeviceNames:    []string{"uuid"},
			ContainerPaths: cdi.DefaultContainerPaths(arch),
		},
		Join: JoinConfig{
			K3sConfig:    k3s.DefaultConfigPath,
			DropIn:       k3s.DefaultDropIn,
			DefaultTaint: yes(),
			GFDLabels:    yes(),
		},
		Selftest: SelftestConfig{
			VulkanLoader: selftest.DefaultVulkanLoader,
			EGLLib:       selftest.DefaultEGLLibrary,
			CUDALib:      selftest.DefaultCUDALibrary,
			Timeout:      selftest.DefaultTimeout,
			RequireEGL:   yes(),
		},
		Up: UpConfig{
			OnSelftestFailure: "block",
			StatusFile:        "/run/nodeprep/status.json",
		},
	}
}

// Parse decodes a config file over the defaults in base: fields the
// file sets replace base's, the rest stay. Unknown keys, a second document,
// a type mismatch or aliases that expand past yamlbound.MaxConfig give an
// error marked fault.ErrMalformed naming name.
func Parse(name string, data []byte, base Config) (Config, error) {
	cfg := base
	// Every document: a second one is decoded to be refused.
	if err := yamlbound.Check(data, yamlbound.MaxConfig); err != nil {
		return base, fault.Malformed(fmt.Errorf("reading config %q: %w", name, err))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return base, fault.Malformed(fmt.Errorf("reading config %q: %w", name, err))
	}
	keys := map[int]string{}
	if errs := checkKeys(&doc, reflect.TypeOf(cfg), "", keys); len(errs) > 0 {
		return base, fault.Malformed(fmt.Errorf("reading config %q: %w", name, errors.Join(errs...)))
	}
	if err := doc.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			err = typeErrors(te, keys)
		}
		return base, fault.Malformed(fmt.Errorf("reading config %q: %w", name, err))
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return base, fault.Malformed(fmt.Errorf("reading config %q: more than one YAML document", name))
	}
	if err := cfg.Validate(); err != nil {
		return base, fault.Malformed(fmt.Errorf("reading config %q: %w", name, err))
	}
	return cfg, nil
}

// Validate checks the values the YAML types cannot: host paths absolute,
// durations not negative, the policy, the device-name strategies (at least
// one), the drop-in's name, the join section's labels (a key given twice
// with two values included) and taints. It returns one error naming every bad key (errors.Join).
func (c Config) Validate() error {
	var errs []error
	abs := func(key, p string, optional bool) {
		if p == "" && optional {
			return
		}
		if !path.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s is %q, want an absolute path", key, p))
		}
	}
	check := func(key string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	abs("cdi.spec", c.CDI.Spec, false)
	abs("cdi.driverRoot", c.CDI.DriverRoot, false)
	for _, d := range c.CDI.SpecDirs {
		abs("cdi.specDirs", d, false)
	}
	for _, d := range c.CDI.GlvndDirs {
		abs("cdi.glvndDirs", d, false)
	}
	cp := c.CDI.ContainerPaths
	for key, p := range map[string]string{
		"cdi.containerPaths.icd": cp.ICD, "cdi.containerPaths.implicitLayer": cp.ImplicitLayer,
		"cdi.containerPaths.eglVendor": cp.EGLVendor, "cdi.containerPaths.eglExternalPlatformDir": cp.EGLExternalPlatformDir,
		"cdi.containerPaths.libDir": cp.LibDir,
	} {
		abs(key, p, false)
	}
	check("cdi.deviceNames", nodepolicy.CheckDeviceNames(c.CDI.DeviceNames))
	abs("join.k3sConfig", c.Join.K3sConfig, false)
	abs("join.k3sDataDir", c.Join.K3sDataDir, true)
	check("join.migStrategy", nodepolicy.CheckMIGStrategy(c.Join.MIGStrategy))
	abs("join.k3sEnvironmentFile", c.Join.K3sEnvironmentFile, true)
	// Every command validates the whole file, the sections it does not use
	// included: a bad join section fails `cdi patch` as it fails `up`.
	labels, err := k3s.ParseLabels(c.Join.Labels)
	if err == nil {
		_, err = nodepolicy.NodeLabels(nil, nodepolicy.NodeLabelOptions{Extra: labels})
	}
	check("join.labels", err)
	_, err = k3s.ParseTaints(c.Join.Taints)
	check("join.taints", err)
	check("join.dropIn", k3s.CheckDropInName(c.Join.DropIn))
	abs("up.statusFile", c.Up.StatusFile, false)
	abs("up.metricsFile", c.Up.MetricsFile, true)
	check("up.onSelftestFailure", nodepolicy.CheckPolicy(c.Up.OnSelftestFailure))
	if c.Cluster.PoolLabel != "" {
		_, err := k3s.ParseLabel(c.Cluster.PoolLabel)
		check("cluster.poolLabel", err)
	}
	if c.Cluster.MaxGPUs < 0 {
		errs = append(errs, fmt.Errorf("cluster.maxGPUs is %d, want 1 or more (0 or absent: the default)", c.Cluster.MaxGPUs))
	}
	if c.NVML.Timeout < 0 {
		errs = append(errs, fmt.Errorf("nvml.timeout is %s, want a positive duration (0 or absent: the default)", c.NVML.Timeout))
	}
	if err := c.Selftest.Requirements().Check(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			errs = append(errs, fmt.Errorf("selftest.%w", e))
		}
	}
	if c.Selftest.Timeout < 0 {
		errs = append(errs, fmt.Errorf("selftest.timeout is %s, want a positive duration (0 or absent: the default)", c.Selftest.Timeout))
	}
	if c.Wait < 0 || c.Wait > MaxWait {
		errs = append(errs, fmt.Errorf("wait is %s, want 0 to %s (0 or absent: the command's default)", c.Wait, ShortDuration(MaxWait)))
	}
	return errors.Join(errs...)
}
