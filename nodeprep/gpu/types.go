package gpu

// Inventory is what NVML says about a host's GPUs, in a stable shape that
// `nodeprep inspect -o json` prints (the README documents every field).
type Inventory struct {
	// Simulated is true when the inventory comes from a built-in simulated
	// server (--simulate), never from a real driver.
	Simulated bool `json:"simulated" yaml:"simulated"`
	// Server names the simulated server ("dgx-h200"); empty for real hosts.
	Server string `json:"server,omitempty" yaml:"server,omitempty"`
	// DriverVersion is the kernel driver version ("550.54.15").
	DriverVersion string `json:"driverVersion" yaml:"driverVersion"`
	// NVMLVersion is the NVML library version ("12.550.54.15").
	NVMLVersion string `json:"nvmlVersion" yaml:"nvmlVersion"`
	// CUDADriverVersion is the highest CUDA version the driver supports
	// ("12.4"), from nvmlSystemGetCudaDriverVersion (major*1000+minor*10).
	CUDADriverVersion string `json:"cudaDriverVersion" yaml:"cudaDriverVersion"`
	// GPUs are the GPUs in NVML index order.
	GPUs []GPU `json:"gpus" yaml:"gpus"`
}

// GPU is one physical GPU. Pointer fields are absent (nil) when NVML says
// NOT_SUPPORTED for them.
type GPU struct {
	Index int `json:"index" yaml:"index"` // NVML index, the order nvidia-smi uses
	// Minor is the device minor number: the GPU's node is /dev/nvidia<Minor>.
	Minor int `json:"minor" yaml:"minor"`
	// UUID is NVML's UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
	UUID string `json:"uuid" yaml:"uuid"`
	// Name is the product name ("NVIDIA H200").
	Name string `json:"name" yaml:"name"`
	// Brand is NVML's brand as nvidia-smi prints it ("NVIDIA", "Tesla",
	// ...; see BrandName).
	Brand string `json:"brand,omitempty" yaml:"brand,omitempty"`
	// Architecture is the GPU family in lower case as GFD names it
	// ("ampere", "hopper", "blackwell").
	Architecture string `json:"architecture,omitempty" yaml:"architecture,omitempty"`
	// PCIBusID is the PCI bus id, "0000:07:00.0" (domain:bus:device.function,
	// lower case hex).
	PCIBusID string `json:"pciBusId" yaml:"pciBusId"`
	// MemoryMiB is the total framebuffer memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB" yaml:"memoryMiB"`
	// ComputeMajor and ComputeMinor are the CUDA compute capability (9.0).
	ComputeMajor int `json:"computeMajor" yaml:"computeMajor"`
	ComputeMinor int `json:"computeMinor" yaml:"computeMinor"` // see ComputeMajor
	// PersistenceMode is nil when not supported.
	PersistenceMode *bool `json:"persistenceMode,omitempty" yaml:"persistenceMode,omitempty"`
	// MIG is nil when the GPU is not MIG-capable.
	MIG *MIG `json:"mig,omitempty" yaml:"mig,omitempty"`
	// ECC is nil when ECC is not supported.
	ECC *ECC `json:"ecc,omitempty" yaml:"ecc,omitempty"`
	// RemappedRows is nil when row remapping is not supported.
	RemappedRows *RemappedRows `json:"remappedRows,omitempty" yaml:"remappedRows,omitempty"`
	// TemperatureC is the core temperature in °C, nil when not supported.
	TemperatureC *int `json:"temperatureC,omitempty" yaml:"temperatureC,omitempty"`
	// Fabric is the GPU's NVLink fabric registration; nil only when it was
	// not read (a GPU lost before it).
	Fabric *Fabric `json:"fabric,omitempty" yaml:"fabric,omitempty"`
	// Health is the verdict on this GPU.
	Health Health `json:"health" yaml:"health"`
}

// MIG is a GPU's Multi-Instance GPU state.
type MIG struct {
	// Current and Pending are the MIG modes now and after the next GPU
	// reset; they differ while a mode change waits for a reset.
	Current bool `json:"current" yaml:"current"`
	Pending bool `json:"pending" yaml:"pending"` // see Current
	// Devices are the MIG devices when Current is on.
	Devices []MIGDevice `json:"devices,omitempty" yaml:"devices,omitempty"`
}

// MIGDevice is one MIG device (a GPU instance with its compute instance).
type MIGDevice struct {
	// Index is the MIG device's index under its GPU
	// (nvmlDeviceGetMigDeviceHandleByIndex).
	Index int `json:"index" yaml:"index"`
	// UUID is "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
	UUID string `json:"uuid" yaml:"uuid"`
	// Profile is the MIG profile name ("1g.18gb"; see MIGProfile).
	Profile string `json:"profile" yaml:"profile"`
	// MemoryMiB is the device's memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB" yaml:"memoryMiB"`
	// Attributes are NVML's device attributes of the MIG device (nil when
	// NVML could not read them).
	Attributes *MIGAttributes `json:"attributes,omitempty" yaml:"attributes,omitempty"`
}

// MIGAttributes are the NVML attributes of a MIG device
// (nvmlDeviceGetAttributes), the ones GPU Feature Discovery turns into
// labels: slice counts of its GPU and compute instances, its
// multiprocessors and its shared engines.
type MIGAttributes struct {
	GISlices        uint32 `json:"giSlices" yaml:"giSlices"`               // GpuInstanceSliceCount
	CISlices        uint32 `json:"ciSlices" yaml:"ciSlices"`               // ComputeInstanceSliceCount
	Multiprocessors uint32 `json:"multiprocessors" yaml:"multiprocessors"` // MultiprocessorCount
	CopyEngines     uint32 `json:"copyEngines" yaml:"copyEngines"`         // SharedCopyEngineCount
	Decoders        uint32 `json:"decoders" yaml:"decoders"`               // SharedDecoderCount
	Encoders        uint32 `json:"encoders" yaml:"encoders"`               // SharedEncoderCount
	JPEGs           uint32 `json:"jpegs" yaml:"jpegs"`                     // SharedJpegCount
	OFAs            uint32 `json:"ofas" yaml:"ofas"`                       // SharedOfaCount
}

// ECC is a GPU's ECC state.
type ECC struct {
	Enabled bool `json:"enabled" yaml:"enabled"` // ECC mode now (not the pending mode)
	// VolatileUncorrected is the count of uncorrected errors since the
	// driver loaded.
	VolatileUncorrected uint64 `json:"volatileUncorrected" yaml:"volatileUncorrected"`
}

// RemappedRows is a GPU's row-remapping state (Ampere and later).
type RemappedRows struct {
	// Correctable and Uncorrectable count the rows remapped for each kind
	// of error; Pending is a remapping that waits for a GPU reset; Failure
	// is a remapping that failed (nvmlDeviceGetRemappedRows).
	Correctable   int  `json:"correctable" yaml:"correctable"`
	Uncorrectable int  `json:"uncorrectable" yaml:"uncorrectable"` // rows remapped for uncorrectable errors
	Pending       bool `json:"pending" yaml:"pending"`             // a remapping waits for a GPU reset
	Failure       bool `json:"failure" yaml:"failure"`             // a remapping failed: the GPU is unhealthy
}

// Fabric is a GPU's registration with the NVLink fabric of an NVSwitch
// system (DGX/HGX H100, H200, B200), as nvmlDeviceGetGpuFabricInfoV reports
// it (nvml.h, nvmlGpuFabricInfo_v3). Until the fabric manager has registered
// a GPU, CUDA on it fails with error 802 ("system not yet initialized")
// while every other NVML query looks healthy.
type Fabric struct {
	// State is FabricNotSupported (no NVLink fabric: PCIe cards, or a
	// driver without the call), FabricNotStarted, FabricInProgress or
	// FabricCompleted.
	State string `json:"state" yaml:"state"`
	// Status is the registration's result, an nvmlReturn_t (0: success),
	// when State is FabricCompleted; nil otherwise.
	Status *int32 `json:"status,omitempty" yaml:"status,omitempty"`
	// HealthMask is NVML's fabric health mask (the
	// NVML_GPU_FABRIC_HEALTH_MASK_* fields) when State is FabricCompleted
	// and the driver reports it (nvmlGpuFabricInfo_v2 and later); nil
	// otherwise. FabricProblems decodes it.
	HealthMask *uint32 `json:"healthMask,omitempty" yaml:"healthMask,omitempty"`
	// HealthSummary is NVML's summary of the fabric's health
	// (nvmlGpuFabricInfo_v3: "healthy", "unhealthy", "limited-capacity"),
	// "" when the driver does not report one.
	HealthSummary string `json:"healthSummary,omitempty" yaml:"healthSummary,omitempty"`
}

// Health is a verdict with its reasons; Healthy is false when any reason
// is present.
type Health struct {
	Healthy bool     `json:"healthy" yaml:"healthy"`                     // false when Reasons is not empty
	Reasons []string `json:"reasons,omitempty" yaml:"reasons,omitempty"` // why the GPU is unhealthy, one per problem
}

// Healthy returns the GPUs whose health verdict is healthy, in order.
func (inv *Inventory) Healthy() []GPU {
	var out []GPU
	for _, g := range inv.GPUs {
		if g.Health.Healthy {
			out = append(out, g)
		}
	}
	return out
}
