package cluster

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// fakeLister serves each path's objects (JSON) and records the queries
// it was asked with.
type fakeLister struct {
	lists   map[string][]string
	queries map[string]url.Values
}

func (f *fakeLister) List(_ context.Context, path string, q url.Values, item func(json.RawMessage) error) error {
	f.queries[path] = q
	for _, o := range f.lists[path] {
		if err := item(json.RawMessage(o)); err != nil {
			return err
		}
	}
	return nil
}

// TestReadLiveNodes: the Nodes are asked for by the pool label and only
// the pool's are kept (a server may ignore the selector), less their
// images; the zero label keeps every Node. A null object in a list is an
// error, not a panic.
func TestReadLiveNodes(t *testing.T) {
	t.Parallel()
	nodes := []string{
		`{"metadata":{"name":"cpu-1","labels":{"kubernetes.io/os":"linux"}}}`,
		`{"metadata":{"name":"gpu-1","labels":{"payload":"task_runner"}},"status":{"images":[{"names":["a"],"sizeBytes":1}]}}`,
	}
	pool, err := k3s.ParseLabel("payload=task_runner")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLister{lists: map[string][]string{"/api/v1/nodes": nodes}, queries: map[string]url.Values{}}
	live, err := ReadLive(context.Background(), f, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Nodes) != 1 || live.Nodes[0].Name != "gpu-1" || live.Nodes[0].Status.Images != nil {
		t.Errorf("pool nodes: %+v; want gpu-1 alone, without its images", live.Nodes)
	}
	if got := f.queries["/api/v1/nodes"].Get("labelSelector"); got != "payload=task_runner" {
		t.Errorf("Nodes asked for with labelSelector %q", got)
	}
	live, err = ReadLive(context.Background(), f, k3s.Label{})
	if err != nil || len(live.Nodes) != 2 {
		t.Errorf("no pool label: %v, %d Nodes; want both", err, len(live.Nodes))
	}
	f.lists["/apis/apps/v1/deployments"] = []string{"null"}
	if _, err := ReadLive(context.Background(), f, pool); err == nil || !strings.Contains(err.Error(), "a Deployment that is null") {
		t.Errorf("a null Deployment: %v", err)
	}
}
