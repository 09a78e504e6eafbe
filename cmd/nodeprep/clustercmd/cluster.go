// Package clustercmd is the `nodeprep cluster` commands, render and check:
// the cluster half of the node contract (nodeprep/cluster), as an
// app.Extension. cmd/nodeprep-cluster links them; the nodeprep binary
// does not, and runs nodeprep-cluster for them (app.ClusterExecutable),
// so that the Kubernetes API types they need stay out of every boot-time
// process.
package clustercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// poolFlags are the flags `cluster render` and `cluster check` share.
type poolFlags struct {
	poolLabel string
	arch      string
}

func (f *poolFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.poolLabel, "pool-label", "", "label key=value that selects the pool's nodes (default cluster.poolLabel, else the first of join.labels)")
	fs.StringVar(&f.arch, "arch", runtime.GOARCH, "the nodes' architecture as GOARCH names it (kubernetes.io/arch)")
}

// pool builds the on-prem pool from the config `join` uses: its labels and
// taints, the pool label, and the CDI settings. Without a pool label the
// error is cluster.ErrNoPoolLabel after what (a usage error).
func (f *poolFlags) pool(env *app.Env, fs *pflag.FlagSet, what string) (cluster.Pool, error) {
	cfg := env.Config()
	labels, err := k3s.ParseLabels(cfg.Join.Labels)
	if err != nil {
		return cluster.Pool{}, err
	}
	taints, err := k3s.ParseTaints(cfg.Join.Taints)
	if err != nil {
		return cluster.Pool{}, err
	}
	p := cluster.Pool{
		Labels:      labels,
		Taints:      nodepolicy.NodeTaints(cfg.Join.DefaultTaint == nil || *cfg.Join.DefaultTaint, taints),
		Arch:        f.arch,
		DeviceNames: cfg.CDI.DeviceNames,
		DriverRoot:  cfg.CDI.DriverRoot,
	}
	switch pl := app.FlagOr(fs, "pool-label", f.poolLabel, cfg.Cluster.PoolLabel); {
	case pl != "":
		l, err := k3s.ParseLabel(pl)
		if err != nil {
			return cluster.Pool{}, fault.Usage(fmt.Errorf("--pool-label: %w", err))
		}
		p.Label = l
		found := false
		for _, x := range labels {
			found = found || x == l
		}
		if !found {
			p.Labels = append(p.Labels, l)
			env.Log().Warn("the pool label is not in join.labels: nodes register with it only when join adds it", "label", l.String())
		}
	case len(labels) > 0:
		p.Label = labels[0]
	default:
		return cluster.Pool{}, fault.Usage(fmt.Errorf("%s: %w", what, cluster.ErrNoPoolLabel))
	}
	return p, nil
}

// New is the `cluster` command with its subcommands, render and check, as
// an app.Extension: it replaces nodeprep's stub for it.
func New(env *app.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: app.ClusterShort,
		Long: app.ClusterShort + `.

These commands are in nodeprep-cluster, not in the nodeprep binary the
node boots with (they link the Kubernetes API types): install
nodeprep-cluster beside nodeprep, from the same build (make build puts
both in bin/, the Nix package in $out/bin). 'nodeprep cluster ...' runs it
with the same arguments; without it, it exits 69 naming the file it
looked for.`,
	}
	cmd.AddCommand(newClusterRenderCommand(env), newClusterCheckCommand(env), newCheckNodeCommand(env), newClusterDrillCommand(env))
	return cmd
}

type clusterRenderOptions struct {
	poolFlags
	out                   string
	name, namespace       string
	image                 string
	gpusPerJob, maxGPUs   int
	fallbackInstanceTypes []string
	capacityTypes         []string
	nodeClass             string
	prometheus            string
	scrapeJob             string
	queueName, queueHost  string
	queueMetric           string
	queueBacklog          int
	healthInterval        time.Duration
	consolidateAfter      time.Duration
}

func newClusterRenderCommand(env *app.Env) *cobra.Command {
	o := &clusterRenderOptions{}
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write the device plugin values, the nvidia-cdi RuntimeClass, an example Job, a KEDA ScaledJob and a Karpenter NodePool that match the nodes",
		Long: `render writes, from the config join uses (taints, labels, the pool label), the
cluster half of the node contract as multi-document YAML on stdout, or one file
each under --out DIR: the NVIDIA device plugin chart's values, the nvidia-cdi
RuntimeClass the GPU pods name, an example GPU Job with the workload snippet, a KEDA ScaledJob for the cloud tier that starts
Jobs for the queue's backlog (RabbitMQ) and, while work waits, when no node of
the pool's scrape job reports nodeprep_ready 1, and a Karpenter NodePool for
the fallback. Values only you know (node class, instance types, Prometheus
address, scrape job, queue, image) are REPLACE_ME placeholders, each marked
with a comment.

-o json prints the documents as one JSON list instead (without the comments;
check reads it back); -o yaml is the YAML stream, as text. --out writes YAML
files and takes no -o json; it replaces all five or, on any failure (exit 73),
none.`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, env) },
	}
	f := cmd.Flags()
	o.poolFlags.add(f)
	f.StringVar(&o.out, "out", "", "write one file per document into this directory instead of stdout")
	f.StringVar(&o.name, "name", "nodeprep-gpu", "name of the example Job; the ScaledJob and NodePool are <name>-fallback (a DNS-1123 subdomain: a-z 0-9 - .)")
	f.StringVar(&o.namespace, "namespace", "default", "namespace of the Job and the ScaledJob (a DNS-1123 label: a-z 0-9 -)")
	f.StringVar(&o.image, "image", "", "the workload's container image, without whitespace or control characters (a simple check, not a parse of the reference) (default a placeholder)")
	f.IntVar(&o.gpusPerJob, "gpus-per-job", 1, "nvidia.com/gpu each pod requests")
	f.IntVar(&o.maxGPUs, "max-gpus", 0, "the fallback's cap: NodePool limit on nvidia.com/gpu, ScaledJob maxReplicaCount = max-gpus / gpus-per-job (default cluster.maxGPUs, else 4)")
	f.StringSliceVar(&o.fallbackInstanceTypes, "fallback-instance-types", nil, "the fallback NodePool's instance types (default cluster.fallbackInstanceTypes, else a placeholder)")
	f.StringSliceVar(&o.capacityTypes, "capacity-types", []string{"on-demand"}, "karpenter.sh/capacity-type values: on-demand, spot, reserved")
	f.StringVar(&o.nodeClass, "node-class", "", "the NodePool's nodeClassRef as group/kind/name, e.g. karpenter.k8s.aws/EC2NodeClass/default (default cluster.nodeClass, else a placeholder)")
	f.StringVar(&o.prometheus, "prometheus-address", "", "the KEDA trigger's Prometheus serverAddress (default cluster.prometheusAddress, else a placeholder)")
	f.StringVar(&o.scrapeJob, "scrape-job", "", "the Prometheus job label of the scrape job that reads this pool's nodes' metrics: the health trigger counts only them (default cluster.scrapeJob, else a placeholder)")
	f.StringVar(&o.queueName, "queue-name", "", "the RabbitMQ queue the work waits in (default cluster.queueName, else a placeholder)")
	f.StringVar(&o.queueHost, "queue-host", "", "the RabbitMQ server for KEDA's queue trigger, an amqp:// or amqps:// URL (default cluster.queueHost, else a placeholder; keep credentials in a TriggerAuthentication, see docs/cluster.md)")
	f.StringVar(&o.queueMetric, "queue-metric", cluster.DefaultQueueMetric, "the Prometheus metric of the queue's ready messages, matched on queue=<queue-name>")
	f.IntVar(&o.queueBacklog, "queue-backlog", 10, "messages waiting that the pool is left to absorb before the queue trigger starts cloud Jobs (its activationValue), 1 or more")
	f.DurationVar(&o.healthInterval, "health-interval", 5*time.Minute, "services.nodeprep.health.interval, positive: a node silent for 3 intervals counts as down")
	f.DurationVar(&o.consolidateAfter, "consolidate-after", 5*time.Minute, "how long an empty fallback node lives (NodePool disruption.consolidateAfter; 0s removes it at once)")
	return cmd
}

func (o *clusterRenderOptions) run(cmd *cobra.Command, env *app.Env) error {
	fs := cmd.Flags()
	if env.Output() == "json" && o.out != "" {
		return fault.Usage(errors.New("--out writes YAML files and -o json prints one JSON list to stdout: use one or the other"))
	}
	if err := o.checkFlags(fs); err != nil {
		return err
	}
	pool, err := o.pool(env, fs, "rendering the cluster manifests")
	if err != nil {
		return err
	}
	cc := env.Config().Cluster
	var nc cluster.NodeClassRef
	if s := app.FlagOr(fs, "node-class", o.nodeClass, cc.NodeClass); s != "" {
		if nc, err = cluster.ParseNodeClass(s); err != nil {
			return badValue(env, fs, "node-class", "cluster.nodeClass", err)
		}
	}
	instanceTypes := app.FlagOr(fs, "fallback-instance-types", o.fallbackInstanceTypes, cc.FallbackInstanceTypes)
	if fs.Changed("fallback-instance-types") && len(instanceTypes) == 0 {
		return fault.Usage(errors.New(`--fallback-instance-types "": give one or more instance types, or leave the flag out for the placeholder`))
	}
	for _, it := range instanceTypes {
		if err := cluster.CheckInstanceType(it); err != nil {
			return badValue(env, fs, "fallback-instance-types", "cluster.fallbackInstanceTypes", err)
		}
	}
	prometheus := app.FlagOr(fs, "prometheus-address", o.prometheus, cc.PrometheusAddress)
	if prometheus != "" {
		if err := cluster.CheckPrometheusAddress(prometheus); err != nil {
			return badValue(env, fs, "prometheus-address", "cluster.prometheusAddress", err)
		}
	}
	scrapeJob := app.FlagOr(fs, "scrape-job", o.scrapeJob, cc.ScrapeJob)
	if scrapeJob != "" || fs.Changed("scrape-job") {
		if err := cluster.CheckScrapeJob(scrapeJob); err != nil {
			return badValue(env, fs, "scrape-job", "cluster.scrapeJob", err)
		}
	}
	queueName := app.FlagOr(fs, "queue-name", o.queueName, cc.QueueName)
	if queueName != "" || fs.Changed("queue-name") {
		if err := cluster.CheckQueueName(queueName); err != nil {
			return badValue(env, fs, "queue-name", "cluster.queueName", err)
		}
	}
	queueHost := app.FlagOr(fs, "queue-host", o.queueHost, cc.QueueHost)
	if queueHost != "" || fs.Changed("queue-host") {
		if err := cluster.CheckQueueHost(queueHost); err != nil {
			return badValue(env, fs, "queue-host", "cluster.queueHost", err)
		}
	}
	if err := cluster.CheckQueueMetric(o.queueMetric); err != nil {
		return fault.Usage(fmt.Errorf("--queue-metric: %w", err))
	}
	if o.queueBacklog < 1 {
		return fault.Usage(fmt.Errorf("--queue-backlog %d: want 1 or more", o.queueBacklog))
	}
	// --max-gpus has no flag default, so that help says its default once.
	maxGPUs := o.maxGPUs
	if !fs.Changed("max-gpus") {
		maxGPUs = 4
		if cc.MaxGPUs > 0 {
			maxGPUs = cc.MaxGPUs
		}
	}
	if maxGPUs < 1 || o.gpusPerJob < 1 {
		return fault.Usage(errors.New("--max-gpus and --gpus-per-job: want 1 or more"))
	}
	docs, err := cluster.Render(cluster.RenderOptions{
		Pool:                  pool,
		GFD:                   env.Config().Join.GFDLabels != nil && !*env.Config().Join.GFDLabels,
		Name:                  o.name,
		Namespace:             o.namespace,
		Image:                 o.image,
		GPUsPerJob:            o.gpusPerJob,
		MaxGPUs:               maxGPUs,
		FallbackInstanceTypes: instanceTypes,
		CapacityTypes:         o.capacityTypes,
		NodeClass:             nc,
		PrometheusAddress:     prometheus,
		ScrapeJob:             scrapeJob,
		QueueName:             queueName,
		QueueHost:             queueHost,
		QueueMetric:           o.queueMetric,
		QueueBacklog:          o.queueBacklog,
		HealthInterval:        o.healthInterval,
		ConsolidateAfter:      &o.consolidateAfter,
	})
	if err != nil {
		return err
	}
	if o.out == "" {
		data := cluster.Join(docs) // text and -o yaml: the stream is YAML
		if env.Output() == "json" {
			if data, err = cluster.JSONList(docs); err != nil {
				return err
			}
		}
		if _, err := env.Streams().Out.Write(data); err != nil {
			return fault.CantWrite(fmt.Errorf("printing the manifests: %w", err))
		}
		return nil
	}
	paths, err := cluster.WriteFiles(o.out, docs)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintf(env.Streams().Out, "wrote %s\n", p)
	}
	return nil
}

// checkFlags checks the flags that have no config key (a bad value is a
// usage error, exit 2, naming the flag): the names and the image with the
// cluster package's checks, each capacity type against Karpenter's, and
// the durations: --health-interval positive, --consolidate-after 0s
// (Karpenter: remove an empty node at once) or positive, both in whole
// seconds.
func (o *clusterRenderOptions) checkFlags(fs *pflag.FlagSet) error {
	type check struct {
		flag string
		err  error
	}
	checks := []check{
		{"name", cluster.CheckName(o.name)},
		{"namespace", cluster.CheckNamespace(o.namespace)},
		{"health-interval", cluster.CheckDuration("health interval", o.healthInterval, false)},
		{"consolidate-after", cluster.CheckDuration("consolidateAfter", o.consolidateAfter, true)},
	}
	if fs.Changed("image") {
		checks = append(checks, check{"image", cluster.CheckImage(o.image)})
	}
	if len(o.capacityTypes) == 0 {
		checks = append(checks, check{"capacity-types", fmt.Errorf(`"": want one or more of %s`, strings.Join(cluster.CapacityTypes, ", "))})
	}
	for _, ct := range o.capacityTypes {
		checks = append(checks, check{"capacity-types", cluster.CheckCapacityType(ct)})
	}
	for _, c := range checks {
		if c.err != nil {
			return fault.Usage(fmt.Errorf("--%s: %w", c.flag, c.err))
		}
	}
	return nil
}

// badValue is err about a value from the flag name when the command line
// set it (a usage error, exit 2), else about the config file's key (its
// value is malformed input, exit 65).
func badValue(env *app.Env, fs *pflag.FlagSet, flag, key string, err error) error {
	if fs.Changed(flag) {
		return fault.Usage(fmt.Errorf("--%s: %w", flag, err))
	}
	return fault.Malformed(fmt.Errorf("reading config %q: %s: %w", env.ConfigName(), key, err))
}

type clusterCheckOptions struct {
	poolFlags
	kubeconfig string
}

func newClusterCheckCommand(env *app.Env) *cobra.Command {
	o := &clusterCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check FILE|DIR|- | --kubeconfig FILE",
		Short: "Check workloads, the device plugin, KEDA and Karpenter manifests against what the nodes register",
		Long: `check reads manifests (multi-document YAML; a directory's *.yaml, *.yml and
*.json files, in its subdirectories too but not in hidden ones such as .git;
- for stdin; an empty argument is a usage error) and judges them with the scheduler's own toleration
and node-affinity rules against the pool nodeprep's config makes (its labels
and taints) and against a node of each Karpenter NodePool in the input:
GPU workloads must schedule on the pool and the fallback, the device plugin
must land on every GPU node and use the CDI spec's device names, a workload
that tolerates the GPU taint must ask for a GPU, and KEDA triggers must query
metrics nodeprep exports. nodeprep's own config (a config.yaml next to the
manifests) is recognised and skipped; a JSON list of documents (render -o json)
is read item by item. It prints a table, object × pool, and exits 1 on any ✗
or when it judged nothing (no manifests, or none about the pool), 2 without a
pool label, 65 for malformed input: a manifest that does not decode, or a
FIFO, socket, device or dangling symlink where a manifest file should be
(only regular files are read).

With --kubeconfig FILE instead of a path it reads the live objects from that
cluster (DaemonSets, Deployments, StatefulSets, Jobs, CronJobs, KEDA
ScaledJobs and ScaledObjects, Karpenter NodePools) and its real Nodes: each
node with the pool label must carry the pool's taints and nodeprep's
nodeprep.dev/gpu-ready label and GPUUnhealthy condition with healthy GPUs,
and the workloads are judged on a healthy pool node as the API serves it;
69 when the cluster cannot be read.
Exit status otherwise as above: 1 on any ✗
pool label, 65 for malformed input: a manifest that does not decode, or a
FIFO, socket, device or dangling symlink where a manifest file should be
(only regular files are read).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("kubeconfig") {
				if len(args) != 0 {
					// Both would judge one and silently drop the other.
					return fault.Usage(fmt.Errorf("cluster check takes either FILE|DIR|- or --kubeconfig FILE, not both (got --kubeconfig and %q): the files, or the live cluster", args[0]))
				}
				return nil
			}
			if len(args) != 1 {
				return fault.Usage(fmt.Errorf("cluster check takes one argument, FILE|DIR|- (a manifest file, a directory of *.yaml, *.yml and *.json files, or - for stdin); got %d", len(args)))
			}
			if args[0] == "" {
				// Not the current directory: an unset variable in a CI
				// job ("check $MANIFESTS") must not check something else.
				return fault.Usage(errors.New(`cluster check "": the argument is empty; name a manifest file, a directory (. for the current one) or - for stdin`))
			}
			return nil
		},
		ValidArgsFunction: manifestCompletion,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return o.runLive(cmd, env)
			}
			return o.run(cmd, env, args[0])
		},
	}
	o.poolFlags.add(cmd.Flags())
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "check the live objects and the real Nodes of the cluster this kubeconfig names, instead of files (give no FILE|DIR|-)")
	return cmd
}

// manifestCompletion completes check's one argument: manifest files
// (*.yaml, *.yml, *.json) and directories, as the shell lists them.
func manifestCompletion(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return []cobra.Completion{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt
}

// isConfig reports whether doc (JSON) is a nodeprep config file: one that
// ParseConfig reads without an error.
func isConfig(doc []byte) bool {
	_, err := config.Parse("", doc, config.Default(runtime.GOARCH))
	return err == nil
}

func (o *clusterCheckOptions) run(cmd *cobra.Command, env *app.Env, src string) error {
	pool, err := o.pool(env, cmd.Flags(), "checking the manifests")
	if err != nil {
		return err
	}
	var (
		objs []cluster.Object
		skip []cluster.Skipped
	)
	rd := cluster.Reader{IsConfig: isConfig}
	if src == "-" {
		in, stop := cancelableReader(cmd.Context(), env.Streams().In)
		defer stop()
		objs, skip, err = rd.Read("stdin", in)
		if cerr := cmd.Context().Err(); cerr != nil {
			return fmt.Errorf("cluster check: cancelled while reading stdin (%w); nothing was checked", cerr)
		}
	} else {
		abs, aerr := filepath.Abs(src)
		if aerr != nil {
			return fault.Usage(fmt.Errorf("manifests %q: %w", src, aerr))
		}
		rd.Dir = filepath.Dir(filepath.Clean(src)) // errors name the path as given
		objs, skip, err = rd.ReadFS(os.DirFS(filepath.Dir(abs)), filepath.Base(abs))
	}
	if err != nil {
		return err
	}
	rep := cluster.Check(objs, skip, cluster.CheckOptions{Pool: pool, Metrics: nodeprep.MetricLabels})
	if err := env.Print(rep, func(w io.Writer) error { return writeClusterText(w, rep) }); err != nil {
		return fault.CantWrite(fmt.Errorf("printing the report: %w", err))
	}
	if len(rep.Rows) == 0 {
		if src == "-" {
			src = "stdin"
		}
		return fault.CheckFailed(fmt.Errorf("cluster check: %s: nothing was checked", nothingIn(cluster.Printable(src), objs, skip)))
	}
	if !rep.OK {
		return app.Silent(fault.CheckFailed(errors.New("cluster check: a manifest does not match the nodes")))
	}
	return nil
}

// cancelableReader returns a reader of r whose Read returns as soon as ctx
// is done (SIGTERM or SIGINT), even while a Read of r blocks (an idle pipe
// or terminal on stdin): r is copied through a pipe by a goroutine, and
// ctx closes the pipe's read end. stop releases the context hook; the
// goroutine ends with r, or at its next write after the pipe is closed.
func cancelableReader(ctx context.Context, r io.Reader) (io.Reader, func()) {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(context.Cause(ctx)) })
	return pr, func() { stop(); pr.Close() }
}

// nothingIn says why a check judged nothing: no manifests in src at all,
// or only objects unrelated to the pool.
func nothingIn(src string, objs []cluster.Object, skip []cluster.Skipped) string {
	if len(objs) == 0 && len(skip) == 0 {
		return fmt.Sprintf("no manifests found in %s", src)
	}
	return fmt.Sprintf("no GPU workload, device plugin, KEDA or Karpenter object in %s (%s, %s)",
		src, app.Count(len(objs), "object"), app.Count(len(skip), "skipped document"))
}

// writeClusterText prints the table, object × column, with ✓, ✗ [n] or –,
// then each ✗'s reason and fix by its number. With no row it prints
// nothing: the command's error says once, on stderr, that nothing was
// checked and why.
func writeClusterText(w io.Writer, r *cluster.Report) error {
	if len(r.Rows) == 0 {
		return nil
	}
	// Names come from the manifests: escape what a terminal would not show
	// as itself (a U+202E in a name would reorder the line).
	esc := cluster.Printable
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		cols[i] = esc(strings.ToUpper(c))
	}
	fmt.Fprintf(tw, "OBJECT\tROLE\t%s\n", strings.Join(cols, "\t"))
	var notes []string
	for _, row := range r.Rows {
		cells := make([]string, 0, len(row.Cells))
		for _, c := range row.Cells {
			switch c.Verdict {
			case cluster.VerdictOK:
				cells = append(cells, "✓")
			case cluster.VerdictFail:
				notes = append(notes, fmt.Sprintf("[%d] %s on %s (%s):\n    %s\n    fix: %s", len(notes)+1, esc(row.Object), esc(c.Column), esc(row.Source), esc(c.Reason), esc(c.Fix)))
				cells = append(cells, fmt.Sprintf("✗ [%d]", len(notes)))
			default:
				cells = append(cells, "–")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", esc(row.Object), row.Role, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
	}
	if len(r.Skipped) > 0 || r.Ignored > 0 {
		configs := 0
		for _, s := range r.Skipped {
			if s.Kind == cluster.KindNodeprepConfig {
				configs++
			}
		}
		var what []string
		if r.Ignored > 0 {
			what = append(what, app.Count(r.Ignored, "workload")+" with no GPU request, pool selector or GPU toleration")
		}
		switch n := len(r.Skipped) - configs; {
		case n == 1:
			what = append(what, "1 document of another kind")
		case n > 1:
			what = append(what, fmt.Sprintf("%d documents of other kinds", n))
		}
		if configs > 0 {
			what = append(what, app.Count(configs, "nodeprep config"))
		}
		fmt.Fprintf(w, "\nnot judged: %s\n", strings.Join(what, "; "))
	}
	verdict := "ok: the manifests match the nodes"
	if !r.OK {
		verdict = "FAILED: " + app.Count(len(notes), "problem")
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}
