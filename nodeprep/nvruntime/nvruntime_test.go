package nvruntime_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/nvruntime"
)

func TestParse(t *testing.T) {
	t.Parallel()
	def := nvruntime.Defaults("c.toml")
	def.Present = true
	tests := []struct {
		name string
		toml string
		want func(c *nvruntime.Config)
		bad  bool
	}{
		{name: "empty file: defaults", toml: ""},
		{name: "mode cdi", toml: "[nvidia-container-runtime]\nmode = \"cdi\"\n", want: func(c *nvruntime.Config) { c.Mode = "cdi" }},
		{name: "cdi mode settings", toml: `
accept-nvidia-visible-devices-envvar-when-unprivileged = false
[nvidia-container-runtime]
log-level = "debug"
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["/etc/cdi"]
default-kind = "example.com/gpu"
annotation-prefixes = []
[nvidia-container-runtime.modes.csv]
mount-spec-path = "/x"
`, want: func(c *nvruntime.Config) {
			c.SpecDirs, c.DefaultKind, c.AnnotationPrefixes, c.AcceptEnvvarUnprivileged = []string{"/etc/cdi"}, "example.com/gpu", []string{}, false
		}},
		{name: "unknown keys are ignored, as the runtime ignores them", toml: "[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\n[features]\nx = true\n"},
		{name: "not TOML", toml: "[nvidia-container-runtime\n", bad: true},
		// The decoder would overflow its stack (a fatal error) on this.
		{name: "nested 2 million deep", toml: "a = " + strings.Repeat("[", 2_000_000), bad: true},
		{name: "mode of the wrong type", toml: "[nvidia-container-runtime]\nmode = 3\n", bad: true},
		{name: "spec-dirs of the wrong type", toml: "[nvidia-container-runtime.modes.cdi]\nspec-dirs = \"/etc/cdi\"\n", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := nvruntime.Parse("c.toml", []byte(tt.toml))
			if tt.bad {
				if !errors.Is(err, fault.ErrMalformed) {
					t.Fatalf("Parse = %+v, %v; want a malformed-input error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := *def
			want.SpecDirs, want.AnnotationPrefixes = append([]string(nil), def.SpecDirs...), append([]string(nil), def.AnnotationPrefixes...)
			if tt.want != nil {
				tt.want(&want)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("Parse =\n%+v, want\n%+v", *got, want)
			}
		})
	}
}

// TestDecide encodes internal/info/auto.go and the .cdi/.legacy programs:
// auto picks cdi only for qualified names; ids get jit-cdi from 1.18 and
// legacy before.
func TestDecide(t *testing.T) {
	t.Parallel()
	v117, v120 := nvruntime.Version{Major: 1, Minor: 17, Patch: 8}, nvruntime.Version{Major: 1, Minor: 20, Patch: 2}
	auto := nvruntime.Defaults("")
	cdi := nvruntime.Defaults("")
	cdi.Mode = "cdi"
	tests := []struct {
		name    string
		c       *nvruntime.Config
		program string
		v       nvruntime.Version
		req     nvruntime.Request
		want    nvruntime.Decision
	}{
		{"auto, ids, 1.20", auto, nvruntime.Program, v120, nvruntime.RequestIDs, nvruntime.Decision{Mode: "jit-cdi", Auto: true}},
		{"auto, ids, 1.17", auto, nvruntime.Program, v117, nvruntime.RequestIDs, nvruntime.Decision{Mode: "legacy", Auto: true}},
		{"auto, ids, unknown version", auto, "", nvruntime.Version{}, nvruntime.RequestIDs, nvruntime.Decision{Mode: "jit-cdi or legacy", Auto: true}},
		{"auto, qualified names", auto, nvruntime.Program, v120, nvruntime.RequestQualified, nvruntime.Decision{Mode: "cdi", Auto: true, ReadsSpecs: true}},
		{"mode cdi, ids", cdi, nvruntime.Program, v117, nvruntime.RequestIDs, nvruntime.Decision{Mode: "cdi", ReadsSpecs: true, Kind: "nvidia.com/gpu"}},
		{".cdi program forces cdi", auto, nvruntime.ProgramCDI, v120, nvruntime.RequestIDs, nvruntime.Decision{Mode: "cdi", ReadsSpecs: true, Kind: "nvidia.com/gpu"}},
		{".legacy program forces legacy", cdi, nvruntime.ProgramLegacy, v120, nvruntime.RequestIDs, nvruntime.Decision{Mode: "legacy"}},
	}
	for _, tt := range tests {
		if got := tt.c.Decide(tt.program, tt.v, tt.req); got != tt.want {
			t.Errorf("%s: Decide = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestProgramAndVersionOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bin, program, version string
	}{
		{"/usr/bin/nvidia-container-runtime", nvruntime.Program, ""},
		{"/nix/store/0123-nvidia-container-toolkit-1.17.8/bin/nvidia-container-runtime.cdi", nvruntime.ProgramCDI, "1.17.8"},
		{"/nix/store/0123-nvidia-container-toolkit-1.20.2/bin/.nvidia-container-runtime.legacy-wrapped", nvruntime.ProgramLegacy, "1.20.2"},
		{"/usr/local/nvidia/toolkit/nvidia-container-runtime-experimental", "", ""},
		{"runc", "", ""},
	}
	for _, tt := range tests {
		if p, v := nvruntime.ProgramOf(tt.bin), nvruntime.VersionOf(tt.bin).String(); p != tt.program || v != tt.version {
			t.Errorf("%s: program %q version %q, want %q %q", tt.bin, p, v, tt.program, tt.version)
		}
	}
}

// FuzzParse: any input parses or is refused as malformed, never a panic,
// and a parsed config always has a mode and a kind.
func FuzzParse(f *testing.F) {
	f.Add([]byte("[nvidia-container-runtime]\nmode = \"cdi\"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"/etc/cdi\"]\n"))
	f.Add([]byte("accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"))
	f.Add([]byte("[nvidia-container-runtime.modes.cdi]\ndefault-kind = \"\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := nvruntime.Parse("f.toml", data)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		if !c.Present || c.Path != "f.toml" {
			t.Fatalf("Parse = %+v", c)
		}
		_ = c.Decide(nvruntime.Program, nvruntime.Version{}, nvruntime.RequestIDs)
	})
}
