package selftest

import (
	"slices"
	"testing"
)

func TestProbeEnv(t *testing.T) {
	t.Parallel()
	got := probeEnv([]string{"PATH=/bin", "MESA_SHADER_CACHE_DISABLE=false"}, "")
	want := []string{"PATH=/bin", "MESA_SHADER_CACHE_DISABLE=false", "__GL_SHADER_DISK_CACHE=0", "VK_LOADER_DEBUG=error,warn"}
	if !slices.Equal(got, want) {
		t.Errorf("probeEnv = %q, want %q (the operator's own setting kept)", got, want)
	}
	got = probeEnv([]string{"PATH=/bin"}, "/r/run/nodeprep/shader-cache")
	want = []string{"PATH=/bin", "MESA_SHADER_CACHE_DIR=/r/run/nodeprep/shader-cache", "__GL_SHADER_DISK_CACHE_PATH=/r/run/nodeprep/shader-cache", "VK_LOADER_DEBUG=error,warn"}
	if !slices.Equal(got, want) {
		t.Errorf("probeEnv with a cache dir = %q, want %q", got, want)
	}
	if probeEnv(nil, "") != nil {
		t.Error("a nil environment must stay nil (inherit)")
	}
}
