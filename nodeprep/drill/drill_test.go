package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// fakeClient serves fixed node and pod lists and records the writes.
type fakeClient struct {
	nodes, pods []string // JSON objects
	writes      []string // "METHOD path body"
}

func (f *fakeClient) List(_ context.Context, path string, _ url.Values, item func(json.RawMessage) error) error {
	list := f.nodes
	if strings.HasSuffix(path, "/pods") {
		list = f.pods
	}
	for _, o := range list {
		if err := item(json.RawMessage(o)); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeClient) Do(_ context.Context, method, path, _ string, in, _ any) error {
	b, _ := json.Marshal(in)
	f.writes = append(f.writes, method+" "+path+" "+string(b))
	return nil
}

const (
	onPrem   = `{"metadata":{"name":"gpu-a","labels":{"payload":"task_runner"}}}`
	fallback = `{"metadata":{"name":"cloud-1","labels":{"payload":"task_runner","karpenter.sh/nodepool":"gpu"}}}`
	marked   = `{"metadata":{"name":"gpu-b","labels":{"payload":"task_runner"},"annotations":{"nodeprep.dev/drill":"old","nodeprep.dev/drill-restore":"{\"unschedulable\":false,\"mode\":\"cordon\"}"}}}`
	canary   = `{"metadata":{"name":"c","namespace":"default","labels":{"nodeprep.dev/drill":"old"}}}`
)

var opts = Options{ID: "t", PoolKey: "payload", PoolValue: "task_runner", Image: "i"}

// TestPlan: the plan names the on-prem and fallback nodes and writes
// nothing; marks on a node or a canary pod refuse (fault.ErrLocked); a
// pool with no on-prem node fails the check; bad options are usage errors.
func TestPlan(t *testing.T) {
	t.Parallel()
	f := &fakeClient{nodes: []string{onPrem, fallback}}
	r, err := Plan(context.Background(), f, opts)
	if err != nil || strings.Join(r.OnPrem, ",") != "gpu-a" || strings.Join(r.FallbackBefore, ",") != "cloud-1" || !r.DryRun || !r.OK || len(f.writes) != 0 {
		t.Fatalf("plan %+v, %v, writes %v", r, err, f.writes)
	}
	for _, tt := range []struct {
		c    *fakeClient
		o    Options
		kind error
		want string
	}{
		{&fakeClient{nodes: []string{onPrem, marked}}, opts, fault.ErrLocked, "node gpu-b (drill old)"},
		{&fakeClient{nodes: []string{onPrem}, pods: []string{canary}}, opts, fault.ErrLocked, "pod default/c (drill old)"},
		{&fakeClient{nodes: []string{fallback}}, opts, fault.ErrCheckFailed, "no on-prem node has the pool label payload=task_runner"},
		{&fakeClient{}, Options{ID: "t", PoolKey: "payload", Image: "i", Mode: "drain"}, fault.ErrUsage, `mode "drain"`},
		{&fakeClient{}, Options{ID: "t", PoolKey: "payload"}, fault.ErrUsage, "no canary image"},
	} {
		_, err := Plan(context.Background(), tt.c, tt.o)
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.want) || len(tt.c.writes) != 0 {
			t.Errorf("%+v: err %v, want %v naming %q; writes %v", tt.o, err, tt.kind, tt.want, tt.c.writes)
		}
	}
}

// TestRestore: a marked node gets back what its annotation says with the
// marks removed, a canary is deleted, and a node whose restore
// annotation does not parse is left marked with a malformed-input error.
func TestRestore(t *testing.T) {
	t.Parallel()
	bad := strings.Replace(marked, `"gpu-b"`, `"gpu-c"`, 1)
	bad = strings.Replace(bad, `"{\"unschedulable\":false,\"mode\":\"cordon\"}"`, `"{"`, 1)
	f := &fakeClient{nodes: []string{onPrem, marked, bad}, pods: []string{canary}}
	r, err := Restore(context.Background(), f)
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "node gpu-c") {
		t.Errorf("err %v, want malformed naming gpu-c", err)
	}
	if strings.Join(r.Restored, ",") != "gpu-b" || strings.Join(r.Deleted, ",") != "default/c" {
		t.Errorf("report %+v", r)
	}
	want := []string{
		`PATCH /api/v1/nodes/gpu-b {"metadata":{"annotations":{"nodeprep.dev/drill":null,"nodeprep.dev/drill-restore":null}},"spec":{"unschedulable":false}}`,
		`DELETE /api/v1/namespaces/default/pods/c {"gracePeriodSeconds":0}`,
	}
	if strings.Join(f.writes, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes\n%s\nwant\n%s", strings.Join(f.writes, "\n"), strings.Join(want, "\n"))
	}
}

// TestNotFound: only the API's 404, through the client's wrapping, counts
// as already gone.
func TestNotFound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fault.Unavailable(fmt.Errorf("deleting: %w", &kubenode.APIError{Code: http.StatusNotFound})), true},
		{fault.Unavailable(&kubenode.APIError{Code: http.StatusForbidden}), false},
		{errors.New("GET x: 404 NotFound"), false},
	} {
		if got := isNotFound(tt.err); got != tt.want {
			t.Errorf("isNotFound(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}

// TestCanaryPrefersOnPrem: the canary asks for the pool's GPU-ready
// nodes and prefers the on-prem ones by name (matchFields: no
// expression Karpenter would read as a requirement), so that with a
// fallback node still up the scheduler returns it on-prem.
func TestCanaryPrefersOnPrem(t *testing.T) {
	t.Parallel()
	f := &fakeClient{}
	o := opts
	o.GPUs = 1
	o.Log = func(string) {}
	d := &drill{c: f, o: o, r: &Report{OnPrem: []string{"gpu-a", "gpu-b"}}}
	if err := d.newCanary(context.Background()); err != nil || len(f.writes) != 1 {
		t.Fatalf("newCanary: %v, writes %v", err, f.writes)
	}
	var pod struct {
		Spec struct {
			NodeSelector map[string]string `json:"nodeSelector"`
			Affinity     struct {
				NodeAffinity struct {
					Preferred []struct {
						Weight     int `json:"weight"`
						Preference struct {
							MatchExpressions []any `json:"matchExpressions"`
							MatchFields      []struct {
								Key, Operator string
								Values        []string
							} `json:"matchFields"`
						} `json:"preference"`
					} `json:"preferredDuringSchedulingIgnoredDuringExecution"`
				} `json:"nodeAffinity"`
			} `json:"affinity"`
		} `json:"spec"`
	}
	body := f.writes[0][strings.Index(f.writes[0], "{"):]
	if err := json.Unmarshal([]byte(body), &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeSelector["payload"] != "task_runner" || pod.Spec.NodeSelector[LabelGPUReady] != "true" {
		t.Errorf("nodeSelector %v", pod.Spec.NodeSelector)
	}
	p := pod.Spec.Affinity.NodeAffinity.Preferred
	var names []string
	for _, term := range p {
		f := term.Preference.MatchFields
		if term.Weight != 100 || len(term.Preference.MatchExpressions) != 0 || len(f) != 1 ||
			f[0].Key != "metadata.name" || f[0].Operator != "In" || len(f[0].Values) != 1 {
			t.Errorf("preferred term %+v, want weight 100 on metadata.name In [one node]\n%s", term, body)
			continue
		}
		names = append(names, f[0].Values[0])
	}
	if strings.Join(names, ",") != "gpu-a,gpu-b" {
		t.Errorf("the canary prefers %v, want gpu-a, gpu-b\n%s", names, body)
	}
}
