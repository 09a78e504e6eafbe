package selftest

import (
	"errors"
	"testing"
)

// TestDecodeRequest: a probe request names its API and its library, and
// nothing else is accepted: no library (dlopen("") is the program
// itself), a negative fence timeout, unknown fields or data after it.
func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	var ok ProbeRequest
	if err := decodeRequest(`{"api":"vulkan","library":"libvulkan.so.1"}`, &ok); err != nil || ok.Library != "libvulkan.so.1" {
		t.Fatalf("a good request: %+v, %v", ok, err)
	}
	for _, bad := range []string{
		`{"api":"vulkan"}`,
		`{"api":"egl","library":""}`,
		`{"api":"vulkan","library":"l","fenceTimeoutMs":-1}`,
		`{"api":"vulkan","library":"l","bogus":1}`,
		`{"api":"vulkan","library":"l"} {"api":"egl","library":"m"}`,
		`{"api":"gl","library":"l"}`,
	} {
		var req ProbeRequest
		if err := decodeRequest(bad, &req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", bad, err)
		}
	}
}
