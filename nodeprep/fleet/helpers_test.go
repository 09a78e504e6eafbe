package fleet

import (
	"slices"
	"testing"
)

func TestContainerdOf(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{
		"1.33.4+k3s1": "2.0", "v1.32.2+k3s1": "2.0", "v1.32.1+k3s1": "1.7", "v1.31.6+k3s1": "2.0",
		"v1.31.5+k3s1": "1.7", "1.30.14+k3s1": "1.7", "": "", "latest": "",
	} {
		if got := ContainerdOf(v); got != want {
			t.Errorf("ContainerdOf(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestKubeletConfigPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--kubelet-arg=config=/nix/store/a-kubelet.conf"}, "/nix/store/a-kubelet.conf"},
		{[]string{"server", "--kubelet-arg", "config=/a", "--kubelet-arg=config=/b"}, "/b"},
		{[]string{"agent", "--kubelet-arg=max-pods=250"}, ""},
		{[]string{"agent", "--kubelet-arg=config=relative.conf"}, ""},
		{[]string{"agent", "--kubelet-arg"}, ""},
	} {
		if got := KubeletConfigPath(tt.args); got != tt.want {
			t.Errorf("KubeletConfigPath(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestStorePaths(t *testing.T) {
	t.Parallel()
	text := `glvndDirs: [/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib]
eglLib: "/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib/libEGL.so.1"
BinaryName = '/nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-container-toolkit-1.17.8/bin/nvidia-container-runtime.cdi'
not: /nix/store/short-name /nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib`
	want := []string{
		"/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib",
		"/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib/libEGL.so.1",
		"/nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-container-toolkit-1.17.8/bin/nvidia-container-runtime.cdi",
	}
	if got := storePaths(text); !slices.Equal(got, want) {
		t.Errorf("storePaths = %q, want %q", got, want)
	}
}
