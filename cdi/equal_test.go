package cdi_test

import (
	"encoding/json"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// equalJSON compares two values by their JSON encoding.
func equalJSON(t testing.TB, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

func hostfsValidate(v func(string) error) hostfs.WriteOptions {
	return hostfs.WriteOptions{Validate: v}
}
