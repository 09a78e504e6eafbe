package app

import (
	"encoding/json"
	"flag"
	"fmt"
	stdmaps "maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

var (
	kubeletCases = flag.Int("kubelet-cases", 36, "TestRealKubeletRegistersAsJoinReports: how many generated configurations start the real kubelet")
	kubeletSeed  = flag.Uint64("kubelet-seed", 29, "TestRealKubeletRegistersAsJoinReports: the generator's seed")
)

// k3sKubeletFlags is the kubelet's command line as k3s's agent builds it
// from the effective lists (k3s pkg/daemons/agent/agent_linux.go,
// kubeletArgs / kubeletArgsAndConfig: "node-labels" is the node-label
// list joined with ",", "register-with-taints" the node-taint list joined
// with "," when it has any; then pkg/daemons/config GetArgs lays the
// kubelet-arg list over them: "k=v" replaces k3s's own k, "k+=v" passes
// k3s's and then v, "k-=v" passes v and then k3s's, a repeated k keeps
// every value, and the flags go out sorted by name). Only the flags a
// Node's registration depends on are modelled; the others pass through.
func k3sKubeletFlags(labels, taints, kubeletArgs []string) []string {
	initial := map[string]string{"node-labels": strings.Join(labels, ",")}
	if len(taints) > 0 {
		initial["register-with-taints"] = strings.Join(taints, ",")
	}
	multi := map[string][]string{}
	for _, a := range kubeletArgs {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok {
			value = "true"
		}
		clean := strings.TrimRight(name, "+-")
		init, hasInit := initial[clean]
		var vals []string
		switch {
		case strings.HasSuffix(name, "+"):
			if hasInit {
				vals = append(vals, init)
			}
			vals = append(append(vals, multi[clean]...), value)
		case strings.HasSuffix(name, "-"):
			vals = append(vals, value)
			if hasInit {
				vals = append(vals, init)
			}
			vals = append(vals, multi[clean]...)
		default:
			vals = append(append(vals, multi[clean]...), value)
		}
		delete(initial, clean)
		multi[clean] = vals
	}
	for k, v := range initial {
		multi[k] = []string{v}
	}
	var out []string
	for _, k := range slices.Sorted(stdmaps.Keys(multi)) {
		for _, v := range multi[k] {
			out = append(out, "--"+k+"="+v)
		}
	}
	return out
}

// kubeletWants is what the kubelet registers from its flags: every
// --node-labels merged (component-base MapStringString: items split at
// ",", empty ones skipped, key and value trimmed, a later key wins), and
// the last --register-with-taints (RegisterWithTaintsVar replaces the
// list on every use), as "key=value:Effect".
func kubeletWants(flags []string) (labels map[string]string, taints []string) {
	labels = map[string]string{}
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--node-labels="); ok {
			for _, item := range strings.Split(v, ",") {
				if item == "" {
					continue
				}
				k, val, _ := strings.Cut(item, "=")
				labels[strings.TrimSpace(k)] = strings.TrimSpace(val)
			}
		}
		if v, ok := strings.CutPrefix(f, "--register-with-taints="); ok {
			taints = nil
			for _, item := range strings.Split(v, ",") {
				if item == "" {
					continue
				}
				kv, effect, _ := strings.Cut(item, ":")
				k, val, _ := strings.Cut(kv, "=")
				taints = append(taints, k+"="+val+":"+effect)
			}
		}
	}
	return labels, taints
}

// The labels the kubelet sets on its own Node whatever its flags say
// (kubelet_node_status.go, initialNode).
var kubeletOwnLabels = []string{"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch"}

// spiceForKubelet adds, to some trees, entries only the kubelet judges:
// labels in the kubernetes.io namespaces it keeps for itself, an empty
// taint beside others, a taint repeating a key and effect, and
// kubelet-args that add labels.
func spiceForKubelet(rng *rand.Rand, tr *k3sTree) {
	if rng.Float64() >= 0.35 {
		return
	}
	extra := []string{
		"--node-label=node-role.kubernetes.io/gpu=true", "--node-label=node.kubernetes.io/instance-type=gpu",
		"--node-label=kubernetes.io/role=gpu", "--node-label=k8s.io/x=1", "--node-label=node-restriction.kubernetes.io/pool=a",
		"--node-taint=", "--node-taint=t=other:NoSchedule", "--kubelet-arg=node-labels+=extra.example/a=1",
		"--kubelet-arg=node-labels+=node-role.kubernetes.io/worker=", "--node-label=topology.kubernetes.io/zone=z1",
	}
	tr.K3sArgs = append(tr.K3sArgs, extra[rng.IntN(len(extra))])
}

// TestRealKubeletRegistersAsJoinReports is the registration property on
// the real kubelet: for generated k3s configurations (TestK3sProperty's
// trees — files, drop-ins, the service's command line and environment,
// join's flags — plus entries only the kubelet judges), `join` runs;
// where it exits 0, nodeprep's own reading of the tree it left (the
// effective lists of `join -o json`) is turned into the kubelet's flags
// as k3s's agent builds them, the real kubelet registers against the
// real API server, and the Node must carry exactly those taints and
// labels, nodeprep's among them. Where `join` refuses because the node
// would not register (exit 65), the kubelet is started with the lists
// k3s would pass (k3sOracle) and must not register, and join's reason
// must name the kubelet when it is the kubelet that refuses. The number
// of kubelet starts is -kubelet-cases, the seed -kubelet-seed.
func TestRealKubeletRegistersAsJoinReports(t *testing.T) {
	api := upstream.StartAPIServer(t)
	ns := upstream.StartNodeNamespace(t)
	ctrd := upstream.StartContainerd(t, upstream.ContainerdConfig{Namespace: ns})
	start := time.Now()
	counts := map[string]int{}
	started := 0
	for i := 0; started < *kubeletCases && i < 50**kubeletCases; i++ {
		rng := rand.New(rand.NewPCG(*kubeletSeed, uint64(i)))
		tr := genTree(rng)
		spiceForKubelet(rng, &tr)
		ok := t.Run(fmt.Sprintf("case%d", i), func(t *testing.T) {
			root := tr.build(t)
			out, errOut, code := joinRun(t, root, tr.joinArgs()...)
			var flags []string
			switch {
			case code == 0:
				var rep joinJSON
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("join -o json: %v\n%s", err, out)
				}
				flags = k3sKubeletFlags(k3s.Values(rep.Effective.NodeLabels), k3s.Values(rep.Effective.NodeTaints), k3s.Values(rep.Effective.KubeletArgs))
				started++
				k := upstream.StartKubelet(t, api, upstream.KubeletOptions{NodeName: fmt.Sprintf("case%d", i), Namespace: ns, Containerd: ctrd, Args: flags})
				body, err := k.Registered(time.Minute)
				if err != nil {
					counts["join 0, kubelet refused"]++
					t.Fatalf("join exited 0, but the kubelet with k3s's flags %q did not register: %v", flags, err)
				}
				k.Stop()
				k.DeleteNode(t)
				counts["join 0, registered"]++
				checkNode(t, body, flags, rep)
			case code == ExitMalformed && strings.Contains(errOut, k3s.ErrNodeRefused.Error()):
				placeDropIn(t, root, tr)
				got := k3sOracle(root, tr.Env, tr.oracleArgs())
				if got.ignoredAll || strings.HasPrefix(got.refused, "urfave/cli") || got.refused == "help" {
					counts["join 65, k3s itself refuses"]++
					return
				}
				flags = k3sKubeletFlags(got.labels, got.taints, got.kubeletArgs)
				started++
				k := upstream.StartKubelet(t, api, upstream.KubeletOptions{NodeName: fmt.Sprintf("case%d", i), Namespace: ns, Containerd: ctrd, Args: flags})
				_, err := k.Registered(20 * time.Second)
				k.Stop()
				k.DeleteNode(t)
				switch {
				case err == nil:
					counts["join 65, registered"]++
					t.Errorf("join refused (the node would not register), but the kubelet with k3s's flags %q registered it:\n%s", flags, errOut)
				case upstream.IsExited(err):
					counts["join 65, kubelet refused"]++
					if !strings.Contains(errOut, "the kubelet refuses") {
						t.Errorf("the kubelet itself refuses %q at start, but join's reason does not say so:\n%s", flags, errOut)
					}
				default:
					counts["join 65, API server refused"]++
					if !strings.Contains(errOut, "the API server refuses") {
						t.Errorf("the kubelet runs but the API server refuses its Node (%q), and join's reason does not say so:\n%s", flags, errOut)
					}
				}
			default:
				counts[fmt.Sprintf("join %d", code)]++
			}
		})
		if !ok {
			data, _ := yaml.Marshal(tr)
			t.Logf("case %d (seed %d):\n%s", i, *kubeletSeed, data)
		}
	}
	t.Logf("%d kubelet starts in %v (seed %d): %v", started, time.Since(start).Round(time.Millisecond), *kubeletSeed, counts)
	if counts["join 0, registered"] < started/3 {
		t.Errorf("outcomes %v: the generator must give joins that register", counts)
	}
}

// checkNode compares the Node the kubelet registered (JSON) with what its
// flags say and with join's report.
func checkNode(t *testing.T, body []byte, flags []string, rep joinJSON) {
	t.Helper()
	var node struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Taints []struct{ Key, Value, Effect string } `json:"taints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &node); err != nil {
		t.Fatal(err)
	}
	wantLabels, wantTaints := kubeletWants(flags)
	var taints []string
	for _, x := range node.Spec.Taints {
		// The API server's TaintNodesByCondition admission adds it to
		// every new Node.
		if x.Key == "node.kubernetes.io/not-ready" && !slices.ContainsFunc(wantTaints, func(s string) bool { return strings.HasPrefix(s, x.Key+"=") }) {
			continue
		}
		taints = append(taints, x.Key+"="+x.Value+":"+x.Effect)
	}
	if !slices.Equal(taints, wantTaints) && len(taints)+len(wantTaints) > 0 {
		t.Errorf("the Node's taints %q, the flags %q say %q", taints, flags, wantTaints)
	}
	labels := stdmaps.Clone(node.Metadata.Labels)
	for _, k := range kubeletOwnLabels {
		if _, ok := wantLabels[k]; !ok {
			delete(labels, k)
		}
	}
	if !stdmaps.Equal(labels, wantLabels) {
		t.Errorf("the Node's labels %v, the flags %q say %v", labels, flags, wantLabels)
	}
	for _, l := range rep.Labels {
		k, v, _ := strings.Cut(l, "=")
		if got, ok := node.Metadata.Labels[k]; !ok || got != v {
			t.Errorf("join reported nodeprep's label %s; the Node has %s=%q (present %v)", l, k, got, ok)
		}
	}
	for _, tt := range rep.Taints {
		kv, effect, _ := strings.Cut(tt, ":")
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(taints, k+"="+v+":"+effect) {
			t.Errorf("join reported nodeprep's taint %s; the Node's taints are %q", tt, taints)
		}
	}
}
