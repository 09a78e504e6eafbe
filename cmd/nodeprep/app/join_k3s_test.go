package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestJoinEffectiveK3s runs join over the host trees where k3s reads its
// configuration from somewhere other than the defaults (testdata/hosts/k3s-*,
// each README says what the tree is and what join must do).
func TestJoinEffectiveK3s(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, scenario string
		args           []string
		want           int
		stderr         []string // substrings of stderr
		dropIn         string   // host path that must exist afterwards ("" = none written)
		absent         []string // host paths that must not exist afterwards
	}{
		{name: "kubelet-arg-taint", scenario: "k3s-kubelet-taint", args: []string{"--gfd-labels=false"}, want: ExitCheckFailed,
			stderr: []string{"register-with-taints=node.cilium.io/agent-not-ready=true:NoExecute", "node-taint+", "without nodeprep's taints"},
			absent: []string{joinDropIn}},
		{name: "kubelet-arg-taint-allowed", scenario: "k3s-kubelet-taint", args: []string{"--gfd-labels=false", "--allow-override"}, want: 0,
			stderr: []string{"allowed by --allow-override"}, dropIn: joinDropIn},
		{name: "kubelet-arg-taint-append", scenario: "k3s-kubelet-taint", args: []string{"--gfd-labels=false", "--k3s-arg", "--kubelet-arg=register-with-taints+=a=b:NoSchedule"}, want: ExitCheckFailed,
			stderr: []string{"kubelet keeps only the last"}},
		{name: "kubelet-arg-taint-no-taint", scenario: "k3s-kubelet-taint", args: []string{"--gfd-labels=false", "--no-default-taint", "--label", "a=b"}, want: 0, dropIn: joinDropIn},
		{name: "kubelet-arg-labels", scenario: "k3s-config-flag", args: []string{"--gfd-labels=false", "--label", "a=b", "--k3s-arg=--config=/srv/k3s.yaml", "--k3s-arg=--kubelet-arg=node-labels=x=y"}, want: ExitCheckFailed,
			stderr: []string{"replaces the --node-labels", "node-labels+=x=y"}},
		{name: "kubelet-arg-labels-append", scenario: "k3s-config-flag", args: []string{"--gfd-labels=false", "--label", "a=b", "--k3s-arg=--config=/srv/k3s.yaml", "--k3s-arg=--kubelet-arg=node-labels+=x=y"}, want: 0, dropIn: "/srv/k3s.yaml.d/50-nodeprep.yaml"},
		{name: "data-dir-registered", scenario: "k3s-data-dir", args: []string{"--gfd-labels=false", "--require-unregistered"}, want: ExitCheckFailed,
			stderr: []string{"/data/k3s/agent/client-kubelet.crt"}, absent: []string{joinDropIn}},
		{name: "data-dir-warns", scenario: "k3s-data-dir", args: []string{"--gfd-labels=false"}, want: 0, stderr: []string{"already registered"}, dropIn: joinDropIn},
		{name: "data-dir-flag-wins", scenario: "k3s-data-dir", args: []string{"--gfd-labels=false", "--require-unregistered", "--k3s-arg", "--data-dir /var/lib/elsewhere"}, want: 0, dropIn: joinDropIn},
		// Class 4: the file's data-dir and the command line's -d are two forms of one flag.
		{name: "data-dir-two-forms", scenario: "k3s-data-dir", args: []string{"--gfd-labels=false", "--k3s-arg", "-d /var/lib/elsewhere"}, want: ExitMalformed,
			stderr: []string{"Cannot use two forms of the same flag: d data-dir", "/etc/rancher/k3s/config.yaml", "k3s would not start"}, absent: []string{joinDropIn}},
		{name: "config-flag", scenario: "k3s-config-flag", args: []string{"--gfd-labels=false", "--k3s-arg=--config=/srv/k3s.yaml"}, want: 0,
			dropIn: "/srv/k3s.yaml.d/50-nodeprep.yaml", absent: []string{"/etc/rancher/k3s"}},
		{name: "config-flag-spaced", scenario: "k3s-config-flag", args: []string{"--gfd-labels=false", "--k3s-arg", "--config /srv/k3s.yaml"}, want: 0,
			dropIn: "/srv/k3s.yaml.d/50-nodeprep.yaml", absent: []string{"/etc/rancher/k3s"}},
		{name: "config-relative", scenario: "k3s-config-flag", args: []string{"--gfd-labels=false", "--k3s-arg=-c=k3s.yaml"}, want: ExitMalformed, stderr: []string{"want an absolute path"}},
		{name: "env-file-data-dir", scenario: "k3s-env-file", args: []string{"--require-unregistered"}, want: ExitCheckFailed,
			stderr: []string{"/srv/k3s/agent/kubelet.kubeconfig"}},
		{name: "env-file-missing", scenario: "k3s-env-file", args: []string{"--k3s-env-file", "/etc/none.env"}, want: ExitUnavailable, stderr: []string{"k3s environment file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, tt.scenario)
			out, errOut, code := joinRun(t, root, tt.args...)
			if code != tt.want {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.want, out, errOut)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if tt.dropIn != "" {
				if _, err := os.Stat(filepath.Join(root, tt.dropIn)); err != nil {
					t.Errorf("drop-in not where k3s reads: %v\nstdout %s", err, out)
				}
			}
			for _, p := range tt.absent {
				if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
					t.Errorf("%s exists; nodeprep wrote where k3s does not read", p)
				}
			}
		})
	}
}

// TestJoinConfigFlagEffective checks that the file named by --config is the
// one merged: its node-label is reported as effective.
func TestJoinConfigFlagEffective(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "k3s-config-flag")
	out, errOut, code := joinRun(t, root, "--gfd-labels=false", "--k3s-arg=--config=/srv/k3s.yaml", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{`"configPath": "/srv/k3s.yaml"`, `"configSource": "k3s arguments"`, `"value": "site=lab"`, `"dataDir": "/var/lib/rancher/k3s"`} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %s:\n%s", s, out)
		}
	}
}

// TestContainerdChecks: `cdi check` fails when k3s's containerd would not
// hand pods the patched spec; `join` reports the same as warnings.
func TestContainerdChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		over     string
		args     []string
		want     int
		contains string // substring of stdout (cdi check) or stderr (join)
	}{
		{over: "k3s-containerd-cdi-off", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "containerd-cdi-disabled"},
		{over: "k3s-containerd-v2-default", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "defaults it to false"},
		{over: "k3s-containerd-spec-dir", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "containerd-spec-dir"},
		// The CDI view reads the directories containerd reads (see TestSpecDirsFromContainerd).
		{over: "k3s-containerd-driver-runtime", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "a path into the driver package"},
		// The nvidia handler's mode auto bypasses the spec; nvidia-cdi serves it (docs/runtime-view.md).
		{over: "k3s-containerd-ok", args: []string{"cdi", "check"}, want: 0, contains: "warning  pod-path-bypass"},
		{over: "nvruntime-auto-only", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "error    pod-path-none"},
		{over: "nvruntime-mode-cdi", args: []string{"cdi", "check"}, want: 0},
		{over: "nvruntime-bad-config", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "nvidia-runtime-config"},
		// Issue 29: the GPU Operator's wrapper points the runtime at the
		// toolkit's own config (mode auto), whatever /etc's says; a config
		// that refuses NVIDIA_VISIBLE_DEVICES to unprivileged pods.
		{over: "nvruntime-operator-wrapper", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: "set by NVIDIA_CTK_CONFIG_FILE_PATH in /usr/local/nvidia/toolkit/nvidia-container-runtime, not /etc/nvidia-container-runtime/config.toml"},
		{over: "nvruntime-envvar-refused", args: []string{"cdi", "check"}, want: 0, contains: "warning  nvidia-runtime-envvar-refused"},
		{over: "nvruntime-envvar-refused", args: []string{"join", "--gfd-labels=false"}, want: 0, contains: "accept-nvidia-visible-devices-envvar-when-unprivileged = false"},
		{over: "nvruntime-auto-only", args: []string{"join", "--gfd-labels=false"}, want: 0, contains: "warning: /var/lib/rancher/k3s/agent/etc/containerd/config.toml: no runtime handler gives GPU pods the patched spec"},
		// Issue 32: a nvidia-cdi handler under the version 2 plugin in a version 3 file.
		{over: "k3s-containerd-v2-table", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: `error    containerd-misplaced-runtime  /var/lib/rancher/k3s/agent/etc/containerd/config.toml: the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores`},
		{over: "k3s-containerd-v2-table-tmpl", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: `move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in it`},
		{over: "k3s-containerd-v3-table-in-v2", args: []string{"cdi", "check"}, want: ExitCheckFailed, contains: `move it to plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi`},
		{over: "k3s-containerd-cdi-off", args: []string{"join", "--gfd-labels=false"}, want: 0, contains: "enable_cdi = false"},
		{over: "k3s-data-dir", args: []string{"join", "--gfd-labels=false", "-v"}, want: 0, contains: "containerd config not yet written (/data/k3s/agent/etc/containerd/config.toml); checked on next boot"},
		{over: "k3s-containerd-cdi-off", args: []string{"join", "--gfd-labels=false", "--k3s-arg=--container-runtime-endpoint=/run/containerd/containerd.sock"}, want: 0, contains: "is not checked"},
	}
	for _, tt := range tests {
		t.Run(tt.over+"/"+tt.args[0], func(t *testing.T) {
			t.Parallel()
			root := testkit.HostLayered(t, "fhs-ubuntu", tt.over)
			out, errOut, code := runCLI(t, append([]string{"--root", root}, tt.args...)...)
			if code != tt.want {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.want, out, errOut)
			}
			if tt.contains != "" && !strings.Contains(out+errOut, tt.contains) {
				t.Errorf("output lacks %q:\nstdout %s\nstderr %s", tt.contains, out, errOut)
			}
			if tt.contains == "" && strings.Contains(out+errOut, "containerd") {
				t.Errorf("containerd findings on a good config:\n%s%s", out, errOut)
			}
		})
	}
}

// TestJoinMIGStrategy: the strategy is checked before anything is written;
// on a GPU node without MIG, single adds only nvidia.com/mig.strategy.
func TestJoinMIGStrategy(t *testing.T) {
	t.Parallel()
	_, errOut, code := joinRun(t, joinHost(t, nil), "--simulate", "dgx-h200", "--mig-strategy", "both")
	if code != ExitUsage || !strings.Contains(errOut, "want none, single or mixed") {
		t.Errorf("bad strategy: exit %d, %s", code, errOut)
	}
	_, errOut, code = joinRun(t, joinHost(t, map[string]string{"/etc/nodeprep/config.yaml": "join:\n  migStrategy: Single\n"}), "--simulate", "dgx-h200")
	if code != ExitMalformed || !strings.Contains(errOut, "join.migStrategy") {
		t.Errorf("bad strategy in the config: exit %d, %s", code, errOut)
	}
	root := joinHost(t, nil)
	if _, errOut, code := joinRun(t, root, "--simulate", "dgx-h200", "--mig-strategy", "single"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(filepath.Join(root, joinDropIn))
	if err != nil || !strings.Contains(string(data), "nvidia.com/mig.strategy=single") || !strings.Contains(string(data), "nvidia.com/gpu.product=NVIDIA-H200") {
		t.Errorf("drop-in %s, %v", data, err)
	}
}

// TestSpecDirsFromContainerd: the CDI view is loaded from the directories
// k3s's containerd reads (cdi_spec_dirs), so a spec outside them is named
// once, by the containerd check, and a copy in a directory only containerd
// lists is seen: the later directory shadows it, as in containerd.
func TestSpecDirsFromContainerd(t *testing.T) {
	t.Parallel()
	root := testkit.HostLayered(t, "fhs-ubuntu", "k3s-containerd-spec-dir")
	out, _, code := runCLI(t, "--root", root, "cdi", "check")
	if code != ExitCheckFailed || strings.Count(out, "containerd-spec-dir") != 1 || strings.Contains(out, "spec-not-read") {
		t.Errorf("exit %d, want 1 with one containerd-spec-dir finding and no spec-not-read:\n%s", code, out)
	}
	// With the spec's directory listed, a copy in an earlier listed
	// directory is seen, and shadowed, as containerd would see it.
	conf := filepath.Join(root, "var/lib/rancher/k3s/agent/etc/containerd/config.toml")
	if err := os.WriteFile(conf, []byte("version = 3\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = true\n  cdi_spec_dirs = [\"/srv/cdi\", \"/var/run/cdi\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "srv/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(filepath.Join(root, "var/run/cdi/nvidia-container-toolkit.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "srv/cdi/copy.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, "--root", root, "cdi", "check")
	if code != ExitOK || !strings.Contains(out, "nvidia.com/gpu=0 in /srv/cdi/copy.json is shadowed by /var/run/cdi/nvidia-container-toolkit.json, in a later CDI directory") {
		t.Errorf("exit %d, want the copy in /srv/cdi named as shadowed:\n%s", code, out)
	}
}
