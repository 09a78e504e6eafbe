package gpu

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// TestFakeDGXH200MatchesSimulated reads the inventory from the fake
// libnvidia-ml.so.1 that NVIDIA's real container toolkit runs against in
// the tests (fakedriver.NVMLDGXH200) and wants exactly the inventory of
// --simulate dgx-h200: the specs the real generator writes from it name
// the GPUs nodeprep's simulated inventory checks them against.
func TestFakeDGXH200MatchesSimulated(t *testing.T) {
	t.Parallel()
	lib := fakeNVML(t, fakedriver.NVMLDGXH200)
	got, err := FromNVMLChild(context.Background(), testChild(t), lib, 10*time.Second)
	if err != nil {
		t.Fatalf("inventory from the fake dgx-h200 NVML: %v", err)
	}
	want, err := Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	want.Simulated, want.Server = false, ""
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	if string(g) != string(w) {
		t.Errorf("fake dgx-h200 NVML's inventory differs from --simulate dgx-h200's\n got: %s\nwant: %s", g, w)
	}
}
