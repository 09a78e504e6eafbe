package generate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// base are the arguments every NixOS unit shape passes.
var base = []string{"--ldconfig-path", "/nix/store/x-glibc-bin/bin/ldconfig", "--library-search-path", "/nix/store/x-nvidia-x11/lib", "--nvidia-cdi-hook-path", "/nix/store/x-tools/bin/nvidia-cdi-hook"}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		tk   Toolkit
		args []string
		want func(o Options) bool
		err  error // nil: parses; ErrRejected or ErrNotModelled otherwise
	}{
		{"defaults", V120, nil, func(o Options) bool {
			return o.Format == "yaml" && slices.Equal(o.NameStrategies, []string{"index", "uuid"}) && o.Vendor == "nvidia.com" && o.Class == "gpu"
		}, nil},
		{"format json", V117, []string{"--format", "json"}, func(o Options) bool { return o.Format == "json" }, nil},
		{"format=JSON", V120, []string{"--format=JSON"}, func(o Options) bool { return o.Format == "json" }, nil},
		{"format from output", V120, []string{"--output", "/var/run/cdi/x.json"}, func(o Options) bool { return o.Format == "json" && o.Output == "/var/run/cdi/x.json" }, nil},
		{"format flag beats output", V120, []string{"--output=/x.json", "--format", "yaml"}, func(o Options) bool { return o.Format == "yaml" }, nil},
		{"bad format", V120, []string{"--format", "toml"}, nil, ErrRejected},
		{"single dash", V117, []string{"-format", "json"}, func(o Options) bool { return o.Format == "json" }, nil},
		{"strategy replaces default", V120, []string{"--device-name-strategy", "uuid"}, func(o Options) bool { return slices.Equal(o.NameStrategies, []string{"uuid"}) }, nil},
		{"strategy repeated", V120, []string{"--device-name-strategy", "index", "--device-name-strategy", "uuid"}, func(o Options) bool {
			return slices.Equal(o.NameStrategies, []string{"index", "uuid"})
		}, nil},
		{"strategy comma list", V117, []string{"--device-name-strategy=uuid,type-index"}, func(o Options) bool {
			return slices.Equal(o.NameStrategies, []string{"uuid", "type-index"})
		}, nil},
		{"bad strategy", V120, []string{"--device-name-strategy", "name"}, nil, ErrRejected},
		{"discovery-mode auto", V120, []string{"--discovery-mode", "auto"}, func(Options) bool { return true }, nil},
		{"mode nvml", V117, []string{"--mode=nvml"}, func(Options) bool { return true }, nil},
		{"mode csv", V120, []string{"--mode", "csv"}, nil, ErrNotModelled},
		{"mode bogus", V120, []string{"--mode", "bogus"}, nil, ErrRejected},
		{"disable-hook 1.20", V120, []string{"--disable-hook", "create-symlinks", "--disable-hooks=chmod"}, func(o Options) bool {
			return slices.Equal(o.DisabledHooks, []string{"create-symlinks", "chmod"})
		}, nil},
		{"disable-hook 1.17", V117, []string{"--disable-hook", "create-symlinks"}, nil, ErrRejected},
		{"no-all-device 1.20", V120, []string{"--no-all-device"}, func(o Options) bool { return o.NoAllDevice }, nil},
		{"no-all-device=false", V120, []string{"--no-all-device=false"}, func(o Options) bool { return !o.NoAllDevice }, nil},
		{"no-all-device 1.17", V117, []string{"--no-all-device"}, nil, ErrRejected},
		{"enable-hook all", V120, []string{"--enable-hook", "all"}, nil, ErrRejected},
		{"nvidia-ctk-path alias", V117, []string{"--nvidia-ctk-path", "/s/bin/nvidia-ctk"}, func(o Options) bool { return o.HookPath == "/s/bin/nvidia-ctk" }, nil},
		{"vendor and class", V120, []string{"--vendor", "k8s.device-plugin.nvidia.com", "--class", "gpu"}, func(o Options) bool { return o.Vendor == "k8s.device-plugin.nvidia.com" }, nil},
		{"bad vendor", V120, []string{"--vendor", "-x"}, nil, ErrRejected},
		{"bad class", V120, []string{"--class", "a.b"}, nil, ErrRejected},
		{"driver-root /", V120, []string{"--driver-root", "/"}, func(o Options) bool { return o.DriverRoot == "/" }, nil},
		{"driver-root elsewhere", V120, []string{"--driver-root", "/run/nvidia/driver"}, nil, ErrNotModelled},
		{"device-id all", V120, []string{"--device-id", "all"}, func(Options) bool { return true }, nil},
		{"device-id 0", V120, []string{"--device-id", "0"}, nil, ErrNotModelled},
		{"device-id 1.17", V117, []string{"--device-id", "all"}, nil, ErrRejected},
		{"feature flag", V120, []string{"--feature-flag", "x"}, nil, ErrNotModelled},
		{"config search path", V117, []string{"--config-search-path", "/etc"}, nil, ErrNotModelled},
		{"unknown flag", V120, []string{"--frobnicate"}, nil, ErrRejected},
		{"missing value", V120, []string{"--format"}, nil, ErrRejected},
		{"positional", V120, []string{"extra"}, nil, ErrNotModelled},
		{"after --", V120, []string{"--", "x"}, nil, ErrNotModelled},
		{"relative search path", V120, []string{"--library-search-path", "lib"}, nil, ErrNotModelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(slices.Clone(base), tc.args...)
			o, err := ParseArgs(tc.tk, args)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, fault.ErrMalformed) {
					t.Fatalf("ParseArgs(%q) = %v, want an error wrapping %v, marked malformed", tc.args, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tc.args, err)
			}
			if !tc.want(o) {
				t.Fatalf("ParseArgs(%q) = %+v", tc.args, o)
			}
		})
	}
}

func TestParseArgsNeedsHookAndSearchPath(t *testing.T) {
	for _, args := range [][]string{
		{"--library-search-path", "/lib"},
		{"--nvidia-cdi-hook-path", "/bin/nvidia-cdi-hook"},
	} {
		if _, err := ParseArgs(V120, args); !errors.Is(err, ErrNotModelled) {
			t.Errorf("ParseArgs(%q) = %v, want ErrNotModelled", args, err)
		}
	}
}

func TestParseToolkit(t *testing.T) {
	for v, want := range map[string]Toolkit{"1.17.8": V117, "v1.17.0": V117, "1.20.2": V120, "1.20.0-rc.1": V120} {
		if got, err := ParseToolkit(v); err != nil || got != want {
			t.Errorf("ParseToolkit(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "1.18.0", "1.16.2", "2.0.0", "1", "x.y"} {
		if _, err := ParseToolkit(v); !errors.Is(err, ErrNotModelled) || !errors.Is(err, fault.ErrMalformed) {
			t.Errorf("ParseToolkit(%q) = %v, want ErrNotModelled", v, err)
		}
	}
}

// FuzzParseArgs: any argument list parses or fails with one of the two
// kinds, never panics, and a parse gives a format, a strategy and the
// search path it was given.
func FuzzParseArgs(f *testing.F) {
	f.Add("--format\x00json\x00--device-name-strategy\x00index,uuid", true)
	f.Add("--disable-hook=create-symlinks\x00--no-all-device", false)
	f.Add("--mode\x00csv\x00--\x00x", true)
	f.Add("-vendor=a.b\x00-class\x00c", true)
	f.Fuzz(func(t *testing.T, joined string, newer bool) {
		tk := V117
		if newer {
			tk = V120
		}
		args := append(slices.Clone(base), strings.Split(joined, "\x00")...)
		o, err := ParseArgs(tk, args)
		if err != nil {
			if !errors.Is(err, ErrRejected) && !errors.Is(err, ErrNotModelled) {
				t.Fatalf("ParseArgs(%q): %v is neither rejected nor not modelled", args, err)
			}
			return
		}
		if o.Format != "json" && o.Format != "yaml" || len(o.NameStrategies) == 0 || len(o.LibrarySearchPaths) == 0 || o.HookPath == "" {
			t.Fatalf("ParseArgs(%q) = %+v", args, o)
		}
	})
}
