package app

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// ClusterExecutable is the file name of the nodeprep that carries the
// cluster commands (cmd/nodeprep-cluster): `nodeprep cluster …` runs it
// when it sits beside nodeprep's own executable, with the same arguments,
// as git runs git-<command>. The commands need the Kubernetes API types
// (k8s.io/api, component-helpers), which would double the nodeprep binary
// and its start-up cost at every boot (docs/faults.md, "Start-up").
const ClusterExecutable = "nodeprep-cluster"

// ClusterShort is the one-line help of `nodeprep cluster`, the same in
// the stub and in the command it stands for.
const ClusterShort = "Render or check the cluster side: device plugin values, workloads, KEDA ScaledJob, Karpenter NodePool"

// newClusterStub is `cluster` in a nodeprep without the cluster commands:
// Main has already run nodeprep-cluster when it is installed (see
// forwardCluster), so the stub runs only when it is not, and says so
// (exit 69).
func newClusterStub() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: ClusterShort,
		Long: ClusterShort + `.

The cluster commands, render and check, are in nodeprep-cluster, which
nodeprep runs from beside its own executable with the same arguments; it
is not installed beside this nodeprep.`,
		DisableFlagParsing: true, // every argument is nodeprep-cluster's
		RunE: func(*cobra.Command, []string) error {
			_, err := clusterExecutable()
			return err
		},
	}
}

// clusterExecutable returns the path of nodeprep-cluster beside this
// executable, or why it cannot be run (fault.ErrUnavailable).
func clusterExecutable() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: finding %s: %w", ClusterExecutable, err))
	}
	p := filepath.Join(filepath.Dir(self), ClusterExecutable)
	if err := unix.Access(p, unix.X_OK); err != nil {
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: the cluster commands are in %s, which is not installed beside %s (%w): install it from the same build (make build puts it in bin/, the Nix package in $out/bin)", ClusterExecutable, self, err))
	}
	return p, nil
}

// forwardCluster replaces this process with nodeprep-cluster when args
// (without the program name) name the cluster stub of root: the command
// itself, its help (`help cluster …`) or a shell's completion request
// (`__complete cluster …`). It returns nil when args name something else
// or nodeprep-cluster is not installed (the stub then says so), and an
// error only when the exec itself fails.
func forwardCluster(root *cobra.Command, args []string) error {
	rest := args
	if len(rest) > 0 && slices.Contains([]string{"help", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd}, rest[0]) {
		rest = rest[1:]
	}
	c, _, err := root.Find(rest)
	if err != nil || c.Name() != "cluster" || !c.DisableFlagParsing {
		return nil
	}
	p, err := clusterExecutable()
	if err != nil {
		return nil
	}
	err = syscall.Exec(p, append([]string{p}, args...), os.Environ())
	return fault.Unavailable(fmt.Errorf("nodeprep cluster: running %s: %w", p, err))
}
