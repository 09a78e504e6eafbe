package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestParseMisplacedRuntimes: a handler table under the other config
// version's CRI plugin is read as misplaced, whatever its name, and never
// as a handler; a table of an odd shape there does not make the file
// malformed (containerd only warns about it).
func TestParseMisplacedRuntimes(t *testing.T) {
	t.Parallel()
	const v2 = `plugins."io.containerd.grpc.v1.cri".containerd.runtimes`
	const v3 = `plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes`
	tests := []struct {
		name      string
		data      string
		runtimes  []Runtime
		misplaced []Runtime
	}{
		{name: "v3 file, v2 table", data: "version = 3\n[" + v3 + ".nvidia.options]\nBinaryName = \"/a\"\n[" + v2 + ".nvidia-cdi.options]\nBinaryName = \"/b\"\n[" + v2 + ".crun]\n",
			runtimes: []Runtime{{Name: "nvidia", BinaryName: "/a"}}, misplaced: []Runtime{{Name: "crun"}, {Name: "nvidia-cdi", BinaryName: "/b"}}},
		{name: "v2 file, v3 table", data: "version = 2\n[" + v2 + ".nvidia.options]\nBinaryName = \"/a\"\n[" + v3 + ".nvidia-cdi.options]\nBinaryName = \"/b\"\n",
			runtimes: []Runtime{{Name: "nvidia", BinaryName: "/a"}}, misplaced: []Runtime{{Name: "nvidia-cdi", BinaryName: "/b"}}},
		{name: "each in its place", data: "version = 3\n[" + v3 + ".nvidia-cdi]\n[plugins.'io.containerd.grpc.v1.cri']\nstream_server_port = \"0\"\n",
			runtimes: []Runtime{{Name: "nvidia-cdi"}}},
		{name: "odd shapes are no handler and no error", data: "version = 3\n[" + v2 + "]\nnvidia-cdi = 5\n[" + v2 + ".nvidia.options]\nBinaryName = 7\n",
			misplaced: []Runtime{{Name: "nvidia"}}},
		{name: "a copy beside the handler in its place", data: "version = 3\n[" + v3 + ".nvidia-cdi]\n[" + v2 + ".nvidia-cdi]\n[" + v2 + ".kata]\n",
			runtimes: []Runtime{{Name: "nvidia-cdi"}}, misplaced: []Runtime{{Name: "kata"}}},
		{name: "runtimes not a table", data: "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nruntimes = 1\n"},
		{name: "version 1 is not judged", data: "[" + v3 + ".nvidia-cdi]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("/c.toml", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Runtimes, tt.runtimes) || !slices.Equal(c.MisplacedRuntimes, tt.misplaced) {
				t.Errorf("runtimes %+v misplaced %+v, want %+v and %+v", c.Runtimes, c.MisplacedRuntimes, tt.runtimes, tt.misplaced)
			}
		})
	}
}

// TestMisplacedHint names the table as it is and where it belongs, in the
// form containerd's docs write it, and nothing for a handler in place.
func TestMisplacedHint(t *testing.T) {
	t.Parallel()
	c := &Config{Path: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", Version: 3, Runtimes: []Runtime{{Name: "nvidia"}}, MisplacedRuntimes: []Runtime{{Name: "nvidia-cdi"}, {Name: "my.runtime"}}}
	for name, want := range map[string]string{
		"nvidia-cdi": `the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores; move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in config-v3.toml.tmpl beside it`,
		"my.runtime": `move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes."my.runtime"`,
		"nvidia":     "",
	} {
		if got := c.MisplacedHint(name); want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("MisplacedHint(%s) = %q, want it to contain %q", name, got, want)
		}
	}
	c.Version = 2
	if got := c.MisplacedHint("nvidia-cdi"); !strings.Contains(got, `which containerd 1.x (config version 2) ignores; move it to plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi in config.toml.tmpl beside it`) {
		t.Errorf("version 2: %q", got)
	}
}

// TestRealContainerdMisplacedRuntime starts the real containerd (the
// pinned v2.4.2) with a config that writes a handler under the other
// version's CRI plugin and compares the handlers its CRI plugin reports
// (crictl info) with nodeprep's reading: in a version 3 file the version 2
// table is not a handler; in a version 2 file (migrated) the version 3
// table is, and every handler under the version 2 plugin is gone — as
// nodeprep's finding says.
func TestRealContainerdMisplacedRuntime(t *testing.T) {
	containerd := upstream.Tool(t, upstream.Containerd, "containerd")
	crictl := upstream.Tool(t, upstream.Containerd, "crictl")
	const rt = "  runtime_type = \"io.containerd.runc.v2\"\n"
	tests := []struct {
		name   string
		config string
		theirs []string // the handlers containerd reports, besides runc
		sev    cdi.Severity
		msg    string
	}{
		{"version 3 with a version 2 table",
			"version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n" + rt +
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia-cdi]\n" + rt,
			[]string{"nvidia"}, cdi.SeverityError, `which containerd 2.x (config version 3) ignores, so pods with runtimeClassName nvidia-cdi fail with ` + "`" + `no runtime for "nvidia-cdi" is configured`},
		{"version 2 with a version 3 table",
			"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n" + rt +
				"[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia-cdi]\n" + rt,
			[]string{"nvidia-cdi"}, cdi.SeverityWarning, `containerd 2.4.2 reads it only because it migrates the file to version 3, and then drops every handler written under plugins."io.containerd.grpc.v1.cri".containerd.runtimes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := installReal(t, containerd)
			p := filepath.Join(host.Dir(), ConfigPath(dataDir))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			info := criInfo(t, containerd, crictl, tt.config)
			var theirs []string
			if ctd, ok := info["containerd"].(map[string]any); ok {
				if rts, ok := ctd["runtimes"].(map[string]any); ok {
					for name := range rts {
						if name != "runc" {
							theirs = append(theirs, name)
						}
					}
				}
			}
			sort.Strings(theirs)
			if !slices.Equal(theirs, tt.theirs) {
				t.Fatalf("containerd's handlers %v, want %v (crictl info: %v)", theirs, tt.theirs, info["containerd"])
			}
			rep, err := Check(host, Options{DataDir: dataDir})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(rep.Findings, func(f cdi.Finding) bool { return f.Code == CodeMisplacedRuntime })
			if i < 0 || rep.Findings[i].Severity != tt.sev || !strings.Contains(rep.Findings[i].Message, tt.msg) {
				t.Errorf("findings %v, want a %s %s containing %q", rep.Findings, tt.sev, CodeMisplacedRuntime, tt.msg)
			}
		})
	}
}
