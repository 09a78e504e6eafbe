package upstream

import (
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// KubeletOptions is what a test's kubelet differs in; StartKubelet
// writes the rest.
type KubeletOptions struct {
	// NodeName is the Node's name (--hostname-override); "" is
	// "nodeprep-test".
	NodeName string
	// Args are more kubelet flags, after the harness's own, as k3s passes
	// them ("--register-with-taints=a=b:NoSchedule", "--node-labels=x=y").
	Args []string
	// Config is merged over the harness's KubeletConfiguration (top-level
	// fields replace the harness's: "evictionHard", "featureGates").
	Config map[string]any
	// Namespace and Containerd are the node's namespace and containerd
	// to run in; nil starts a new NodeNamespace and a containerd in it
	// with ContainerdConfig (below). A test that starts many kubelets
	// (one a case) shares one of each.
	Namespace  *NodeNamespace
	Containerd *ContainerdInstance
	// ContainerdConfig is the config of the containerd StartKubelet
	// starts when Containerd is nil; its Namespace is set to the node's.
	ContainerdConfig ContainerdConfig
}

// KubeletInstance is a kubelet started by StartKubelet.
type KubeletInstance struct {
	// NodeName is the Node it registers.
	NodeName string
	// Namespace and Containerd are the ones it runs in and talks to.
	Namespace  *NodeNamespace
	Containerd *ContainerdInstance
	// Dir holds its config, kubeconfig, credential and log.
	Dir string
	// Log is its log file (stdout and stderr).
	Log string
	// Done is closed when it exits.
	Done <-chan struct{}

	api  *APIServer
	stop func()
}

// StartKubelet starts the pinned kubelet (tools module Kubernetes) as a
// k3s agent runs it, in a private mount and network namespace
// (NodeNamespace) so the host keeps its sysctls, cgroups and files, with
// a client credential for system:node:<NodeName> against api (reached
// through NodeNamespace.Forward), the node IP NodeIP and a
// KubeletConfiguration that runs on this machine:
//
//   - failCgroupV1: false — the test machines may be cgroup v1;
//   - cgroupsPerQOS: false, enforceNodeAllocatable: [] — no kubepods
//     cgroups on the host (the containers' own cgroups come and go with
//     them);
//   - containerRuntimeEndpoint: the namespace's containerd;
//   - the eviction thresholds at zero and image GC off — a test's disk
//     and memory never taint the node;
//   - webhook authentication and authorization off, the read-only port
//     closed.
//
// It does not wait: Registered waits for the Node, Stop stops it early
// (before a new case starts another with the same node name); t.Cleanup
// stops it and removes Dir. A kubelet that refuses its flags exits; Done
// is closed then and Registered says so with the end of its log.
func StartKubelet(t testing.TB, api *APIServer, o KubeletOptions) *KubeletInstance {
	t.Helper()
	prog := filepath.Join(Dir(t, Kubernetes), "kubelet")
	if o.NodeName == "" {
		o.NodeName = "nodeprep-test"
	}
	if o.Namespace == nil {
		o.Namespace = StartNodeNamespace(t)
	}
	if o.Containerd == nil {
		cc := o.ContainerdConfig
		cc.Namespace = o.Namespace
		o.Containerd = StartContainerd(t, cc)
	}
	dir, err := os.MkdirTemp("", "kubelet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k := &KubeletInstance{NodeName: o.NodeName, Namespace: o.Namespace, Containerd: o.Containerd, Dir: dir, Log: filepath.Join(dir, "kubelet.log"), api: api}

	cert, key := api.issue(t, pkix.Name{CommonName: "system:node:" + o.NodeName, Organization: []string{"system:nodes"}}, false)
	files := map[string][]byte{"ca.crt": api.CA, "client.crt": cert, "client.key": key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server := "https://" + o.Namespace.Forward(t, strings.TrimPrefix(api.URL, "https://"))
	kc := testkit.KubeletKubeconfig(server, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err := os.WriteFile(filepath.Join(dir, "kubelet.kubeconfig"), []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"cgroupsPerQOS":            false,
		"enforceNodeAllocatable":   []string{},
		"cgroupDriver":             "cgroupfs",
		"containerRuntimeEndpoint": "unix://" + o.Containerd.Socket,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": filepath.Join(dir, "ca.crt")},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"evictionHard":                map[string]string{"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeStatusUpdateFrequency":   "2s",
		"syncFrequency":               "5s",
		"fileCheckFrequency":          "5s",
		"resolvConf":                  "",
	}
	for key, v := range o.Config {
		cfg[key] = v
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--config=" + cfgFile,
		"--kubeconfig=" + filepath.Join(dir, "kubelet.kubeconfig"),
		"--hostname-override=" + o.NodeName,
		"--node-ip=" + NodeIP,
		"--read-only-port=0",
		"--cert-dir=" + filepath.Join(dir, "pki"),
	}, o.Args...)
	logf, err := os.Create(k.Log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := o.Namespace.Command(prog, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting the kubelet: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	k.Done = done
	stopped := false
	k.stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	t.Cleanup(k.stop)
	return k
}

// Stop stops the kubelet (SIGTERM, then SIGKILL after 10 s) and waits
// for it to exit; the Node stays in the API server (DeleteNode removes
// it). A second Stop does nothing.
func (k *KubeletInstance) Stop() { k.stop() }

// Exited reports whether the kubelet has exited.
func (k *KubeletInstance) Exited() bool {
	select {
	case <-k.Done:
		return true
	default:
		return false
	}
}

// Registered waits (at most timeout) until the API server holds the
// kubelet's Node and returns it as JSON. The error says that the kubelet
// exited first (errExited, with the end of its log) or that the time ran
// out.
func (k *KubeletInstance) Registered(timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		code, body, err := k.api.Do(http.MethodGet, "/api/v1/nodes/"+k.NodeName, "", nil)
		if err == nil && code == http.StatusOK {
			return body, nil
		}
		if k.Exited() {
			return nil, fmt.Errorf("the kubelet %w before registering node %s:\n%s", errExited, k.NodeName, logTail(k.Log))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s not registered after %s (last answer %d %v):\n%s", k.NodeName, timeout, code, err, logTail(k.Log))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// IsExited reports whether err (from Registered) says the kubelet exited
// before it registered: it refused its flags or its configuration.
func IsExited(err error) bool { return errors.Is(err, errExited) }

// DeleteNode deletes the kubelet's Node (after Stop, so that a next
// kubelet with the same name registers it anew); a Node already gone is
// no error.
func (k *KubeletInstance) DeleteNode(t testing.TB) {
	t.Helper()
	code, body, err := k.api.Do(http.MethodDelete, "/api/v1/nodes/"+k.NodeName, "", nil)
	if err != nil || (code/100 != 2 && code != http.StatusNotFound) {
		t.Fatalf("deleting node %s: %d %v: %s", k.NodeName, code, err, body)
	}
}

// Path is p (an absolute path as the node's programs see it: a pod's
// log under /var/log/pods, the device plugins' socket directory) as this
// process reaches it, through the namespace holder's root.
func (n *NodeNamespace) Path(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.Pid), p)
}

// errExited is what Registered wraps when the kubelet exited first.
var errExited = errors.New("exited")

// WaitPod waits (at most timeout) until pod namespace/name is in one of
// phases ("Running", "Succeeded", "Failed") and returns that phase; when
// the time runs out it returns the last phase seen ("" for a pod not
// found), and the test judges it.
func WaitPod(t testing.TB, api *APIServer, namespace, name string, timeout time.Duration, phases ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		code, body, err := api.Do(http.MethodGet, "/api/v1/namespaces/"+namespace+"/pods/"+name, "", nil)
		if err == nil && code == http.StatusOK {
			var p struct {
				Status struct {
					Phase string `json:"phase"`
				} `json:"status"`
			}
			if json.Unmarshal(body, &p) == nil {
				last = p.Status.Phase
				if slices.Contains(phases, last) {
					return last
				}
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WritePauseImage builds a static pause(2) loop with gcc (the sandbox's
// one process, as registry.k8s.io/pause's is) and writes it as an OCI
// image archive named ref at path, for a containerd that reaches no
// registry: ContainerdConfig.SandboxImage and ImportImage. It fails t
// when gcc cannot build it.
func WritePauseImage(t testing.TB, path, ref string) {
	t.Helper()
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer")
	if err := os.MkdirAll(layer, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "pause.c")
	if err := os.WriteFile(src, []byte("#include <signal.h>\n#include <unistd.h>\nstatic void h(int s) { (void)s; _exit(0); }\nint main(void) { signal(SIGTERM, h); signal(SIGINT, h); for (;;) pause(); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", filepath.Join(layer, "pause"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the pause binary: %v\n%s", err, out)
	}
	if err := WriteOCIArchive(path, Image{Ref: ref, Layers: []string{layer}, Entrypoint: []string{"/pause"}}); err != nil {
		t.Fatal(err)
	}
}

// CreateWhenAdmitted POSTs obj to path as an admin, retrying (at most
// timeout) while admission refuses it for what the controller-manager
// has yet to make (the namespace's default ServiceAccount); it fails t on
// any other refusal or when the time runs out, and returns the body.
func CreateWhenAdmitted(t testing.TB, api *APIServer, path string, obj any, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body, err := api.Do(http.MethodPost, path, "", obj)
		if err == nil && code/100 == 2 {
			return body
		}
		if err != nil || !strings.Contains(string(body), "serviceaccount") || time.Now().After(deadline) {
			t.Fatalf("POST %s: %d %v: %s", path, code, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
