package manifest_test

import (
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/manifest"
)

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"file_format_version":"1.0.1","ICD":{"library_path":"/nix/store/x/lib/libGLX_nvidia.so.0","api_version":"1.3.277"}}`,
		`{"file_format_version":"1.0.1","layers":[{"name":"a","library_path":"liba.so"},{"name":"meta"}]}`,
		`{"file_format_version":"1.0.0","layer":{"name":"b","library_path":""}}`,
		`{"ICD":{}}`, `[]`, `null`,
	} {
		f.Add(0, []byte(seed))
	}
	kinds := []manifest.Kind{manifest.KindICD, manifest.KindImplicitLayer, manifest.KindEGLVendor, manifest.KindEGLPlatform}
	f.Fuzz(func(t *testing.T, k int, data []byte) {
		kind := kinds[uint(k)%uint(len(kinds))]
		info, err := manifest.Parse(kind, data)
		if err != nil {
			return
		}
		if info.FileFormatVersion == "" {
			t.Fatal("parsed a manifest without file_format_version")
		}
		for _, l := range info.Libraries {
			if l == "" {
				t.Fatal("empty library path accepted")
			}
		}
		if kind != manifest.KindImplicitLayer && len(info.Libraries) != 1 {
			t.Fatalf("%d libraries for a %s manifest", len(info.Libraries), kind)
		}
	})
}
