package selftest

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestProbeEnv(t *testing.T) {
	t.Parallel()
	const tun = "GLIBC_TUNABLES=" + mallocTunables
	tests := []struct {
		name  string
		env   []string
		cache string
		want  []string
	}{
		{"the operator's own setting kept", []string{"PATH=/bin", "MESA_SHADER_CACHE_DISABLE=false"}, "",
			[]string{"PATH=/bin", "MESA_SHADER_CACHE_DISABLE=false", "__GL_SHADER_DISK_CACHE=0", "VK_LOADER_DEBUG=error,warn", tun}},
		{"a cache dir", []string{"PATH=/bin"}, "/r/run/nodeprep/shader-cache",
			[]string{"PATH=/bin", "MESA_SHADER_CACHE_DIR=/r/run/nodeprep/shader-cache", "__GL_SHADER_DISK_CACHE_PATH=/r/run/nodeprep/shader-cache", "VK_LOADER_DEBUG=error,warn", tun}},
		// glibc reads the list in order: the operator's entries come
		// after nodeprep's and win.
		{"the operator's tunables after nodeprep's", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0", "PATH=/bin"}, "",
			[]string{tun + ":glibc.malloc.hugetlb=0", "PATH=/bin", "MESA_SHADER_CACHE_DISABLE=true", "__GL_SHADER_DISK_CACHE=0", "VK_LOADER_DEBUG=error,warn"}},
		{"an empty GLIBC_TUNABLES", []string{"GLIBC_TUNABLES="}, "/c",
			[]string{tun, "MESA_SHADER_CACHE_DIR=/c", "__GL_SHADER_DISK_CACHE_PATH=/c", "VK_LOADER_DEBUG=error,warn"}},
	}
	for _, tc := range tests {
		if got := probeEnv(tc.env, tc.cache); !slices.Equal(got, tc.want) {
			t.Errorf("%s: probeEnv = %q, want %q", tc.name, got, tc.want)
		}
	}
	if probeEnv(nil, "") != nil {
		t.Error("a nil environment must stay nil (inherit)")
	}
}

// TestMallocTunablesAccepted runs the dynamic linker with the tunables the
// probe children get: glibc parses them at start-up, and a name it took
// for a typo would be dropped silently, so the test reads them back
// (ld.so --list-tunables, glibc 2.33 and newer).
func TestMallocTunablesAccepted(t *testing.T) {
	t.Parallel()
	ldso := "/lib64/ld-linux-x86-64.so.2"
	if _, err := os.Stat(ldso); err != nil {
		t.Skipf("no %s on this architecture", ldso)
	}
	cmd := exec.Command(ldso, "--list-tunables")
	cmd.Env = []string{"GLIBC_TUNABLES=" + mallocTunables}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --list-tunables: %v", ldso, err)
	}
	for _, kv := range strings.Split(mallocTunables, ":") {
		name, value, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			t.Fatalf("tunable %s: %v", kv, err)
		}
		if line := fmt.Sprintf("%s: %#x ", name, n); !strings.Contains(string(out), line) {
			t.Errorf("glibc did not take %s (no %q in ld.so --list-tunables):\n%s", kv, line, out)
		}
	}
}
