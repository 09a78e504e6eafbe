package containerd

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

const spec = "/var/run/cdi/nvidia-container-toolkit.json"

func TestCheckHostTrees(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario string
		opts     Options
		codes    []string // the findings' codes, in order
		errors   int
		message  string // substring of some finding
		dirs     []string
	}{
		{scenario: "k3s-containerd-cdi-off", codes: []string{CodeCDIDisabled}, errors: 1, message: "enable_cdi = false", dirs: DefaultSpecDirs},
		{scenario: "k3s-containerd-v2-default", codes: []string{CodeCDIDisabled}, errors: 1, message: "containerd 1.x (config version 2) defaults it to false", dirs: DefaultSpecDirs},
		{scenario: "k3s-containerd-ok", codes: nil, dirs: DefaultSpecDirs},
		{scenario: "k3s-containerd-spec-dir", codes: []string{CodeSpecDirMissing}, errors: 1, message: "does not include /var/run/cdi", dirs: []string{"/etc/cdi"}},
		{scenario: "k3s-containerd-driver-runtime", codes: []string{CodeRuntimeBinary}, errors: 1, message: "a path into the driver package", dirs: DefaultSpecDirs},
		{scenario: "k3s-containerd-ok", opts: Options{Endpoint: "unix:///run/containerd/containerd.sock"}, codes: []string{CodeExternal}},
		{scenario: "k3s-data-dir", opts: Options{DataDir: "/data/k3s"}, codes: []string{CodeNotWritten}, message: "containerd config not yet written"},
		// Issue 32: a handler table under the other version's CRI plugin.
		{scenario: "k3s-containerd-v2-table", codes: []string{CodeMisplacedRuntime}, errors: 1, dirs: DefaultSpecDirs,
			message: `the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores, so pods with runtimeClassName nvidia-cdi fail with ` + "`" + `no runtime for "nvidia-cdi" is configured` + "`" + `; move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in config-v3.toml.tmpl beside it`},
		{scenario: "k3s-containerd-v2-table-tmpl", codes: []string{CodeMisplacedRuntime}, errors: 1, dirs: DefaultSpecDirs,
			message: `config-v3.toml.tmpl: the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores, so pods with runtimeClassName nvidia-cdi fail with ` + "`" + `no runtime for "nvidia-cdi" is configured` + "`" + `; move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in it`},
		{scenario: "k3s-containerd-v3-table-in-v2", codes: []string{CodeMisplacedRuntime}, errors: 1, dirs: DefaultSpecDirs,
			message: `the handler nvidia-cdi is under plugins."io.containerd.cri.v1.runtime".containerd.runtimes, which containerd 1.x (config version 2) ignores, so pods with runtimeClassName nvidia-cdi fail with ` + "`" + `no runtime for "nvidia-cdi" is configured` + "`" + `; move it to plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi in config.toml.tmpl beside it`},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+tt.opts.Endpoint, func(t *testing.T) {
			t.Parallel()
			root := testkit.LayeredTree(t, "fhs-ubuntu", tt.scenario)
			opts := tt.opts
			if opts.DataDir == "" {
				opts.DataDir = "/var/lib/rancher/k3s"
			}
			opts.SpecPaths = []string{spec}
			opts.DriverRoot = "/usr"
			rep, err := Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			var codes []string
			for _, f := range rep.Findings {
				codes = append(codes, f.Code)
			}
			if !slices.Equal(codes, tt.codes) || rep.Findings.Errors() != tt.errors {
				t.Errorf("findings %v, want codes %v with %d errors", rep.Findings, tt.codes, tt.errors)
			}
			if tt.message != "" && !slices.ContainsFunc(rep.Findings, func(f cdi.Finding) bool { return strings.Contains(f.Message, tt.message) }) {
				t.Errorf("no finding says %q: %v", tt.message, rep.Findings)
			}
			if tt.dirs != nil && (rep.Config == nil || !slices.Equal(rep.Config.CDISpecDirs(), tt.dirs)) {
				t.Errorf("CDISpecDirs: %+v, want %v", rep.Config, tt.dirs)
			}
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	tests := []struct {
		name    string
		data    string
		version int64
		cdi     *bool
		enabled bool
		rts     []Runtime
	}{
		{name: "empty", data: "", version: 1},
		{name: "v2-on", data: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n", version: 2, cdi: &yes, enabled: true},
		{name: "v3-default", data: "version = 3\n", version: 3, enabled: true},
		{name: "v3-off", data: "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = false\n", version: 3, cdi: &no},
		// A v3 file with the v2 plugin name: containerd 2.x reads only the v3 name.
		{name: "v3-wrong-plugin", data: "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = false\n", version: 3, enabled: true},
		{name: "runtimes", data: "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia-cdi.options]\nBinaryName = \"/b\"\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n", version: 3, enabled: true,
			rts: []Runtime{{Name: "nvidia"}, {Name: "nvidia-cdi", BinaryName: "/b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("/c.toml", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tt.version || (c.EnableCDI == nil) != (tt.cdi == nil) || (c.EnableCDI != nil && *c.EnableCDI != *tt.cdi) || c.CDIEnabled() != tt.enabled || !slices.Equal(c.Runtimes, tt.rts) {
				t.Errorf("got %+v (enabled %v)", c, c.CDIEnabled())
			}
		})
	}
	// A config nested 2 million arrays deep overflowed the decoder's stack
	// (a fatal error, every command down); it is malformed like any other.
	for _, bad := range []string{"version = 3\na = " + strings.Repeat("[", 2_000_000), "version = \"x\"\n", "[plugins\n", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = \"yes\"\n"} {
		if _, err := Parse("/c.toml", []byte(bad)); !errors.Is(err, fault.ErrMalformed) {
			t.Errorf("%q: err %v, want malformed", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("version = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = true\ncdi_spec_dirs = [\"/etc/cdi\"]\n"))
	f.Add([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/x\"\n"))
	f.Add([]byte("version = 3\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia-cdi.options]\nBinaryName = \"/x\"\n"))
	f.Add([]byte("version = 2\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]\nnvidia = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("/f.toml", data)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Errorf("unmarked error %v", err)
			}
			return
		}
		if len(c.CDISpecDirs()) == 0 && c.SpecDirs == nil {
			t.Error("no spec dirs and no defaults")
		}
		for _, rt := range c.MisplacedRuntimes {
			if c.MisplacedHint(rt.Name) == "" {
				t.Errorf("misplaced %q has no hint", rt.Name)
			}
			if slices.ContainsFunc(c.Runtimes, func(r Runtime) bool { return r.Name == rt.Name }) {
				t.Errorf("%q is both a handler and misplaced", rt.Name)
			}
		}
	})
}

func TestTemplateOnly(t *testing.T) {
	t.Parallel()
	root := testkit.LayeredTree(t, "fhs-ubuntu", "k3s-containerd-ok")
	dir := filepath.Join(root.Dir(), "var/lib/rancher/k3s/agent/etc/containerd")
	if err := os.Remove(filepath.Join(dir, "config.toml")); err != nil {
		t.Fatal(err)
	}
	tmpl := "{{ template \"base\" . }}\nversion = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = {{ .EnableCDI }}false\n"
	if err := os.WriteFile(filepath.Join(dir, "config-v3.toml.tmpl"), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(root, Options{DataDir: "/var/lib/rancher/k3s", SpecPaths: []string{spec}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(rep.Template, "config-v3.toml.tmpl") || rep.Findings.Errors() != 1 || rep.Findings[0].Code != CodeCDIDisabled {
		t.Errorf("template %q, findings %v; want the template read and CDI off", rep.Template, rep.Findings)
	}
}

// TestNewerVersion: a config version nodeprep does not know is checked as
// the newest it knows, and said so.
func TestNewerVersion(t *testing.T) {
	t.Parallel()
	root := testkit.LayeredTree(t, "fhs-ubuntu", "k3s-containerd-ok")
	conf := filepath.Join(root.Dir(), "var/lib/rancher/k3s/agent/etc/containerd/config.toml")
	if err := os.WriteFile(conf, []byte("version = 4\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(root, Options{DataDir: "/var/lib/rancher/k3s", SpecPaths: []string{spec}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Findings.Errors() != 0 || !slices.ContainsFunc(rep.Findings, func(f cdi.Finding) bool { return f.Code == CodeVersion }) {
		t.Errorf("findings %v; want only a %s warning", rep.Findings, CodeVersion)
	}
}

// BenchmarkCheck measures one containerd check over a host tree (read,
// parse, spec directories resolved, the runtime binary stat'ed): the cost
// `join`, `up` and `cdi check` add.
func BenchmarkCheck(b *testing.B) {
	root := testkit.LayeredTree(b, "fhs-ubuntu", "k3s-containerd-ok")
	opts := Options{DataDir: "/var/lib/rancher/k3s", SpecPaths: []string{spec}, DriverRoot: "/usr"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Check(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSpecDirs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario string
		opts     Options
		want     []string
		known    bool
	}{
		{scenario: "k3s-containerd-spec-dir", want: []string{"/etc/cdi"}, known: true},
		{scenario: "k3s-containerd-ok", want: DefaultSpecDirs, known: true},
		{scenario: "k3s-data-dir", opts: Options{DataDir: "/data/k3s"}, want: DefaultSpecDirs, known: true},
		{scenario: "k3s-containerd-ok", opts: Options{Endpoint: "/run/containerd/containerd.sock"}},
	}
	for _, tt := range tests {
		opts := tt.opts
		if opts.DataDir == "" {
			opts.DataDir = "/var/lib/rancher/k3s"
		}
		dirs, known, err := SpecDirs(testkit.LayeredTree(t, "fhs-ubuntu", tt.scenario), opts)
		if err != nil || known != tt.known || !slices.Equal(dirs, tt.want) {
			t.Errorf("%s: SpecDirs = %v, %v, %v; want %v, %v", tt.scenario, dirs, known, err, tt.want, tt.known)
		}
	}
}
