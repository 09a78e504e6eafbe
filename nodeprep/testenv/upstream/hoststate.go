package upstream

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostState is what the node's programs could change on this machine and
// must not: the kubelet's sysctls and the forwarding one (a pod network's
// bridge sets it), the host's network interfaces, the
// cgroups named for Kubernetes at the top of each hierarchy, and the
// kubelet's default directories.
type hostState struct {
	Sysctls    map[string]string
	Interfaces []string
	KubeCgroup []string
	Paths      map[string]bool
}

func snapshotHost(t testing.TB) hostState {
	t.Helper()
	s := hostState{Sysctls: map[string]string{}, Paths: map[string]bool{}}
	for _, k := range append(slices.Clone(kubeletSysctls), "net/ipv4/ip_forward") {
		if data, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(data))
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		s.Interfaces = append(s.Interfaces, i.Name)
	}
	// Two levels: /sys/fs/cgroup/<controller>/<name> on v1, and
	// /sys/fs/cgroup/<name> on v2.
	for _, pat := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup/*/*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			if strings.Contains(filepath.Base(p), "kube") {
				s.KubeCgroup = append(s.KubeCgroup, p)
			}
		}
	}
	for _, p := range []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/etc/kubernetes", "/run/containerd/runc/k8s.io"} {
		_, err := os.Lstat(p)
		s.Paths[p] = err == nil
	}
	return s
}

// CheckHostUnchanged registers a comparison of the host's state with the
// one now, failing t where it changed: the kubelet's sysctls and the
// forwarding one a pod network sets, the host's network interfaces, the
// cgroups named for Kubernetes at the top of each hierarchy, and the
// kubelet's default directories. Call it before starting the node's
// programs, so that it runs after their cleanups.
func CheckHostUnchanged(t testing.TB) {
	t.Helper()
	before := snapshotHost(t)
	t.Cleanup(func() {
		after := snapshotHost(t)
		for k, v := range before.Sysctls {
			if after.Sysctls[k] != v {
				t.Errorf("the host's %s changed: %s → %s", k, v, after.Sysctls[k])
			}
		}
		if !slices.Equal(before.Interfaces, after.Interfaces) {
			t.Errorf("the host's network interfaces changed: %v → %v", before.Interfaces, after.Interfaces)
		}
		for _, p := range after.KubeCgroup {
			if !slices.Contains(before.KubeCgroup, p) {
				t.Errorf("cgroup %s was left on the host", p)
			}
		}
		for p, was := range before.Paths {
			if after.Paths[p] != was {
				t.Errorf("%s on the host: existed %v, now %v", p, was, after.Paths[p])
			}
		}
	})
}
