// Package nodecmd is `node-report`, the hidden command with which
// `nodeprep health` and `nodeprep up` tell this node's Node object what
// they found (nodeprep/kubenode), as an app.Extension. It needs net/http
// and crypto/tls, which the nodeprep binary leaves out (its start-up is
// paid at every boot): cmd/nodeprep-cluster links it, and nodeprep runs
// that executable for it (app.NodeReportCommand).
package nodecmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

type options struct {
	kubeconfig string
	ready      bool
	stage      string
	message    string
	timeout    time.Duration
}

// New returns the node-report command.
func New(env *app.Env) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:    app.NodeReportCommand,
		Short:  "Set nodeprep's GPU condition and label on this node's Node (run by health and up)",
		Hidden: true,
		Long: `node-report sets the node condition ` + kubenode.ConditionType + ` and the label
` + kubenode.LabelGPUReady + ` on the Node that the kubeconfig's client certificate
(CN=system:node:<name>) belongs to, with that credential: the kubelet's.
nodeprep health and nodeprep up run it with their verdict.

Exit status: 0 reported, 65 a kubeconfig or certificate that does not parse,
is not a regular file or is larger than 1 MiB, 69 the API server cannot be reached,
refused the request or answered with a redirect (which is never followed: the
verdict and the credential go to the kubeconfig's server or nowhere).`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := kubenode.Load(env.Host(), o.kubeconfig)
			if err != nil {
				return err
			}
			defer c.Close()
			for _, w := range c.Warnings() {
				env.Log().Warn(w)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			res, err := c.Report(ctx, kubenode.Health{Ready: o.ready, Reason: kubenode.Reason(o.ready, o.stage), Message: o.message, Now: time.Now()})
			if err != nil {
				return fmt.Errorf("reporting to Node %s: %w", c.Node(), err)
			}
			// The warnings go into the JSON result too: health and up
			// run node-report quietly, and log them from there.
			out := struct {
				*kubenode.Result `yaml:",inline"`
				Warnings         []string `json:"warnings,omitempty" yaml:"warnings,omitempty"`
			}{res, c.Warnings()}
			return env.Print(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "node %s: %s=%s (%s), %s\n", res.Node, res.Condition.Type, res.Condition.Status, res.Condition.Reason, res.Label)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "host path of the kubelet's kubeconfig")
	f.BoolVar(&o.ready, "ready", false, "the node's GPUs are ready")
	f.StringVar(&o.stage, "failed-stage", "", "the stage that failed (inventory, selftest, ...), for the condition's reason")
	f.StringVar(&o.message, "message", "", "the condition's message")
	f.DurationVar(&o.timeout, "timeout", kubenode.DefaultTimeout, "the longest the report may take")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
