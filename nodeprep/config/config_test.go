package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, c Config)
		err   string
	}{
		{name: "empty keeps defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.CDI.DriverRoot != "/run/opengl-driver" || !*c.Join.DefaultTaint || !*c.Join.GFDLabels || !*c.Selftest.RequireEGL || c.Selftest.Timeout != 30*time.Second {
				t.Errorf("defaults lost: %+v", c)
			}
		}},
		// Each *bool default is its own: setting one leaves the others.
		{name: "one bool", yaml: "join:\n  defaultTaint: false\n", check: func(t *testing.T, c Config) {
			if *c.Join.DefaultTaint || !*c.Join.GFDLabels || !*c.Selftest.RequireEGL {
				t.Errorf("defaultTaint=%v gfdLabels=%v requireEGL=%v", *c.Join.DefaultTaint, *c.Join.GFDLabels, *c.Selftest.RequireEGL)
			}
		}},
		{name: "nested and durations", yaml: "cdi:\n  containerPaths:\n    icd: /usr/share/vulkan/icd.d/nv.json\nselftest:\n  timeout: 5s\nwait: 1m\n", check: func(t *testing.T, c Config) {
			if c.CDI.ContainerPaths.ICD != "/usr/share/vulkan/icd.d/nv.json" || c.CDI.ContainerPaths.EGLVendor == "" || c.Selftest.Timeout != 5*time.Second || c.Wait != time.Minute {
				t.Errorf("%+v", c)
			}
		}},
		{name: "unknown key", yaml: "cdi:\n  specPath: /x\n", err: "line 2: unknown key cdi.specPath"},
		{name: "typo suggests", yaml: "selftest:\n  timout: 5s\n", err: "unknown key selftest.timout (did you mean timeout?)"},
		{name: "typo at top", yaml: "wiat: 5s\n", err: "unknown key wiat (did you mean wait?)"},
		{name: "case typo", yaml: "cdi:\n  driverroot: /x\n", err: "unknown key cdi.driverroot (did you mean driverRoot?)"},
		{name: "deep unknown", yaml: "cdi:\n  containerPaths:\n    icds: /x\n", err: "unknown key cdi.containerPaths.icds (did you mean icd?)"},
		{name: "bad duration", yaml: "selftest:\n  timeout: five\n", err: `line 2: selftest.timeout wants a duration such as 30s, not "five"`},
		{name: "cluster section", yaml: "cluster:\n  poolLabel: payload=task_runner\n  maxGPUs: 8\n  fallbackInstanceTypes: [g5.xlarge]\n", check: func(t *testing.T, c Config) {
			if c.Cluster.PoolLabel != "payload=task_runner" || c.Cluster.MaxGPUs != 8 || len(c.Cluster.FallbackInstanceTypes) != 1 {
				t.Errorf("%+v", c.Cluster)
			}
		}},
		{name: "bad pool label", yaml: "cluster:\n  poolLabel: payload\n", err: "cluster.poolLabel"},
		{name: "negative max GPUs", yaml: "cluster:\n  maxGPUs: -1\n", err: "cluster.maxGPUs"},
		{name: "bad policy", yaml: "up:\n  onSelftestFailure: ignore\n", err: "want block or taint"},
		{name: "two documents", yaml: "wait: 1s\n---\nwait: 2s\n", err: "more than one YAML document"},
		{name: "type mismatch", yaml: "join:\n  labels: a=b\n", err: `join.labels wants a list of strings, not "a=b"`},
		{name: "empty spec path", yaml: "cdi:\n  spec: \"\"\n", err: "cdi.spec is \"\", want an absolute path"},
		{name: "relative container path", yaml: "cdi:\n  containerPaths:\n    libDir: lib\n", err: "cdi.containerPaths.libDir"},
		{name: "bad strategy", yaml: "cdi:\n  deviceNames: [foo]\n", err: "cdi.deviceNames: device-name strategy \"foo\""},
		{name: "drop-in in a subdirectory", yaml: "join:\n  dropIn: sub/x.yaml\n", err: "plain file name"},
		{name: "drop-in k3s ignores", yaml: "join:\n  dropIn: foo.txt\n", err: "join.dropIn"},
		{name: "relative metrics", yaml: "up:\n  metricsFile: x.prom\n", err: "up.metricsFile"},
		{name: "negative timeout", yaml: "selftest:\n  timeout: -5s\n", err: "selftest.timeout"},
		{name: "required limits and features", yaml: "selftest:\n  requiredLimits:\n    maxBufferSize: 4294967296\n    minStorageBufferOffsetAlignment: 256\n  requiredFeatures: [shader-f16]\n", check: func(t *testing.T, c Config) {
			q := c.Selftest.Requirements()
			if q.Limits["maxBufferSize"] != 4294967296 || q.Limits["minStorageBufferOffsetAlignment"] != 256 || len(q.Features) != 1 || q.Features[0] != "shader-f16" {
				t.Errorf("requirements %+v", q)
			}
		}},
		{name: "unknown required limit", yaml: "selftest:\n  requiredLimits:\n    maxBuferSize: 1\n", err: "selftest.requiredLimits.maxBuferSize: not a limit wgpu reports"},
		{name: "alignment not a power of two", yaml: "selftest:\n  requiredLimits:\n    minUniformBufferOffsetAlignment: 48\n", err: "selftest.requiredLimits.minUniformBufferOffsetAlignment: 48 is not a power of two"},
		{name: "negative required limit", yaml: "selftest:\n  requiredLimits:\n    maxBufferSize: -1\n", err: "selftest.requiredLimits"},
		{name: "unknown required feature", yaml: "selftest:\n  requiredFeatures: [shader-f64]\n", err: `selftest.requiredFeatures: "shader-f64" is not a feature`},
		{name: "negative NVML timeout", yaml: "nvml:\n  timeout: -1s\n", err: "nvml.timeout"},
		{name: "negative wait", yaml: "wait: -1s\n", err: "wait is -1s"},
		// Aliases: refused when they expand past yamlbound.MaxConfig,
		// before a decoder expands them, in any document.
		{name: "alias bomb", yaml: "cluster:\n  nodeClass: &a " + strings.Repeat("x", 200_000) + "\njoin:\n  labels: [" + strings.Repeat("*a, ", 4000) + "]\n", err: "YAML document 1 expands to 763.1 MiB"},
		{name: "alias bomb in a second document", yaml: "wait: 1s\n---\na: &a " + strings.Repeat("x", 200_000) + "\nb: [" + strings.Repeat("*a, ", 4000) + "]\n", err: "YAML document 2 expands to"},
		{name: "aliases within the bound", yaml: "cluster:\n  poolLabel: &p payload=gpu\njoin:\n  labels: [*p]\n", check: func(t *testing.T, c Config) {
			if len(c.Join.Labels) != 1 || c.Join.Labels[0] != "payload=gpu" {
				t.Errorf("join.labels = %q", c.Join.Labels)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := Default("amd64")
			c, err := Parse("config.yaml", []byte(tt.yaml), base)
			if tt.err != "" {
				if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "config.yaml") {
					t.Fatalf("err = %v, want malformed naming the file and %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
			if fresh := Default("amd64"); !*fresh.Join.DefaultTaint {
				t.Error("parsing changed the defaults of a later Default")
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("cdi:\n  driverRoot: /x\njoin:\n  taints: [a=b:NoSchedule]\n"))
	f.Add([]byte("up: {onSelftestFailure: taint}\nwait: 3s"))
	f.Add([]byte("selftest:\n  requiredLimits: {maxBufferSize: 1, minUniformBufferOffsetAlignment: 64}\n  requiredFeatures: [subgroups]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, Default("arm64"))
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		if c.Up.OnSelftestFailure != nodepolicy.PolicyBlock && c.Up.OnSelftestFailure != nodepolicy.PolicyTaint {
			t.Fatalf("accepted policy %q", c.Up.OnSelftestFailure)
		}
	})
}

// TestParseConfigNoGoTypes: no config error names a Go type, whatever the
// mistake: the user wrote YAML keys, not config.SelftestConfig.
func TestParseConfigNoGoTypes(t *testing.T) {
	t.Parallel()
	for _, y := range []string{
		"selftest:\n  timout: 5s\n", "selftest: 3\n", "join:\n  defaultTaint: maybe\n",
		"cdi:\n  glvndDirs: {a: b}\n", "wait: [1]\n", "up: [a]\n", "nvml:\n  library: [x]\n",
	} {
		_, err := Parse("config.yaml", []byte(y), Default("amd64"))
		if err == nil {
			t.Errorf("%q: no error", y)
			continue
		}
		for _, goName := range []string{"nodeprep.", "time.", "[]", "*bool", "type ", "unmarshal"} {
			if strings.Contains(err.Error(), goName) {
				t.Errorf("%q: error names Go type %q: %v", y, goName, err)
			}
		}
	}
}

// TestShortDuration: bounds as they are typed.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 10 * time.Second: "10s", 2 * time.Minute: "2m", time.Millisecond: "1ms", 1000 * time.Hour: "1000h", time.Hour + time.Second: "1h0m1s"} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
