package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

const dataDir = "/var/lib/rancher/k3s"

// installReal lays the real containerd binary where k3s keeps its own
// (BinaryPath) in a fresh host tree.
func installReal(t *testing.T, bin string) *hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	dst := filepath.Join(dir, BinaryPath(dataDir))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		t.Fatal(err)
	}
	out.Close()
	host, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// criInfo starts the real containerd with config (its state, root and
// socket are under t.TempDir) and returns the CRI config `crictl info`
// reports, as the kubelet's CRI client reads it.
func criInfo(t *testing.T, containerd, crictl, config string) map[string]any {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctd") // short: a unix socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	full := fmt.Sprintf("root = %q\nstate = %q\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc") + config
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cmd := exec.Command(containerd, "--config", cfg)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c := exec.CommandContext(ctx, crictl, "--runtime-endpoint", "unix://"+sock, "--config", os.DevNull, "info")
		c.Env = append(os.Environ(), "CRI_CONFIG_FILE="+os.DevNull)
		out, err := c.Output()
		if err == nil {
			var info struct {
				Config map[string]any `json:"config"`
			}
			if err := json.Unmarshal(out, &info); err != nil {
				t.Fatalf("crictl info: %v\n%s", err, out)
			}
			return info.Config
		}
		if ctx.Err() != nil {
			t.Fatalf("containerd did not answer crictl info: %v\n%s", err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRealContainerdCDIConfig starts the real containerd (the pinned
// v2.4.2) with each form of config k3s may render and compares what its
// CRI plugin reports (crictl info: cdiSpecDirs, and no enableCDI at all:
// CDI is always on) with nodeprep's reading of the same file and binary.
func TestRealContainerdCDIConfig(t *testing.T) {
	containerd := upstream.Tool(t, upstream.Containerd, "containerd")
	crictl := upstream.Tool(t, upstream.Containerd, "crictl")
	tests := []struct {
		name   string
		config string
		dirs   []string // cdiSpecDirs nodeprep and containerd must report
		code   string   // a finding nodeprep must report ("" = none)
	}{
		{"version 3, defaults", "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  restrict_oom_score_adj = true\n", DefaultSpecDirs, ""},
		{"version 3, enable_cdi = false", "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  restrict_oom_score_adj = true\n  enable_cdi = false\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\", \"/var/lib/cdi\"]\n", []string{"/etc/cdi", "/var/run/cdi", "/var/lib/cdi"}, CodeIgnoredKey},
		{"version 2 (migrated), enable_cdi unset", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  restrict_oom_score_adj = true\n  cdi_spec_dirs = [\"/var/run/cdi\"]\n", []string{"/var/run/cdi"}, ""},
		{"version 2 (migrated), enable_cdi = false", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  restrict_oom_score_adj = true\n  enable_cdi = false\n", DefaultSpecDirs, CodeIgnoredKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := installReal(t, containerd)
			p := filepath.Join(host.Dir(), ConfigPath(dataDir))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			got := criInfo(t, containerd, crictl, tt.config)
			if _, ok := got["enableCDI"]; ok {
				t.Errorf("containerd 2.4.2 reports enableCDI = %v: it is supposed to have no such setting", got["enableCDI"])
			}
			var theirs []string
			for _, d := range got["cdiSpecDirs"].([]any) {
				theirs = append(theirs, d.(string))
			}
			rep, err := Check(host, Options{DataDir: dataDir, SpecPaths: nil})
			if err != nil {
				t.Fatal(err)
			}
			ours, known, err := SpecDirs(host, Options{DataDir: dataDir})
			if err != nil || !known {
				t.Fatal(err)
			}
			if !slices.Equal(ours, theirs) || !slices.Equal(ours, tt.dirs) {
				t.Errorf("spec dirs: nodeprep %q, containerd %q, want %q", ours, theirs, tt.dirs)
			}
			if rep.Installed == nil || rep.Installed.Version != "2.4.2" {
				t.Errorf("installed containerd = %+v, want 2.4.2", rep.Installed)
			}
			if n := rep.Findings.Errors(); n != 0 {
				t.Errorf("nodeprep says CDI is off or the config is wrong, containerd has it on: %v", rep.Findings)
			}
			has := slices.ContainsFunc(rep.Findings, func(f cdi.Finding) bool { return f.Code == tt.code })
			if tt.code != "" && !has {
				t.Errorf("findings %v lack %s", rep.Findings, tt.code)
			}
		})
	}
}

// TestTemplateOnBase: a template built on k3s's base template has the
// base's version (3 for config-v3.toml.tmpl), not version 1; read before
// k3s rendered it, its enable_cdi = true is no error.
func TestTemplateOnBase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int64
	}{{tmplV3, 3}, {tmplV2, 2}} {
		host, err := hostfs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(host.Dir(), dataDir, configDir, tc.name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		plugin := pluginCRIv2
		if tc.version == 3 {
			plugin = pluginCRIv3
		}
		os.WriteFile(p, []byte("{{ template \"base\" . }}\n[plugins.\""+plugin+"\"]\n  enable_cdi = true\n"), 0o644)
		rep, err := Check(host, Options{DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Config == nil || rep.Config.Version != tc.version || rep.Findings.Errors() != 0 {
			t.Errorf("%s: config %+v, findings %v", tc.name, rep.Config, rep.Findings)
		}
	}
}

// TestTemplateMultilineAction: a template whose actions and comments span
// lines, as text/template accepts, is read with them dropped.
func TestTemplateMultilineAction(t *testing.T) {
	host, err := hostfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(host.Dir(), dataDir, configDir, tmplV3)
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("{{ template \"base\" . }}\n{{/* a\nmultiline comment */}}\n{{- if\n  .NodeConfig }}\n{{ end }}\n"), 0o644)
	rep, err := Check(host, Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Config == nil || rep.Config.Version != 3 || rep.Findings.Errors() != 0 {
		t.Errorf("config %+v, findings %v", rep.Config, rep.Findings)
	}
}

// TestReadInstalledFIFO: a FIFO where k3s keeps containerd's binary is
// refused at once, not opened with a read that blocks for ever.
func TestReadInstalledFIFO(t *testing.T) {
	host, err := hostfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(host.Dir(), BinaryPath(dataDir))
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadInstalled(host, BinaryPath(dataDir)); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, bounded.ErrNotRegular) {
			t.Errorf("ReadInstalled of a FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ReadInstalled blocked on a FIFO")
	}
}
