package cudaprobe

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeRequest: any request string either decodes to a CUDA request
// with a library, or is refused with ErrBadRequest; it never panics, and
// IsRequest agrees with the api of what decodes.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"api":"cuda","library":"libcuda.so.1"}`)
	f.Add(`{"api":"cuda","library":"/run/opengl-driver/lib/libcuda.so.1","seed":7}`)
	f.Add(`{"api":"vulkan","library":"libvulkan.so.1"}`)
	f.Add(`{"api":"cuda","library":""}`)
	f.Add(`{"api":"cuda","library":"x","extra":1}`)
	f.Add(`{"api":"cuda","library":"x"} {}`)
	f.Fuzz(func(t *testing.T, s string) {
		req, err := DecodeRequest(s)
		if err != nil {
			return
		}
		if req.API != API || req.Library == "" {
			t.Fatalf("accepted %q as %+v", s, req)
		}
		if !IsRequest(s) {
			t.Fatalf("DecodeRequest accepts %q, IsRequest does not", s)
		}
	})
}

// FuzzDecode: a probe child's report line decodes to a Report with a
// library, or is refused; a decoded report encodes and decodes again to
// the same JSON.
func FuzzDecode(f *testing.F) {
	good, _ := json.Marshal(&Report{Library: "libcuda.so.1", Devices: []Device{{Ordinal: 0, UUID: "GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9", Memory: true, Kernel: true}}})
	f.Add(string(good))
	f.Add(`{"library":"libcuda.so.1","stage":"cuInit","code":802,"result":"CUDA_ERROR_SYSTEM_NOT_READY","devices":[]}`)
	f.Add(`{"library":""}`)
	f.Add(`{"library":"x","unknown":true}`)
	f.Add(`{"library":"x"}garbage`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Decode([]byte(s))
		if err != nil {
			return
		}
		if r.Library == "" {
			t.Fatalf("decoded %q without a library", s)
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Decode(data)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", data, err)
		}
		data2, _ := json.Marshal(r2)
		if string(data) != string(data2) {
			t.Fatalf("round trip changed %s to %s", data, data2)
		}
	})
}
