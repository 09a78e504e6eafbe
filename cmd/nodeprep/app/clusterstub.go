package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
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
// forwardCluster), so the stub runs only when it is not or cannot be
// run, and says why (exit 69).
func newClusterStub() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: ClusterShort,
		Long: ClusterShort + `.

The cluster commands, render and check, are in nodeprep-cluster, which
nodeprep runs from beside its own executable with the same arguments; it
is not installed beside this nodeprep, or cannot be run there:
'nodeprep cluster' says why.`,
		DisableFlagParsing: true, // every argument is nodeprep-cluster's
		RunE: func(*cobra.Command, []string) error {
			_, err := clusterExecutable()
			return err
		},
	}
}

// clusterExecEnv is set, to nodeprep-cluster's path, in the environment
// of the nodeprep-cluster that forwardCluster runs. A nodeprep that finds
// it set and still has only the stub is that nodeprep-cluster, and so a
// copy of or a link to nodeprep: it says so (exit 69) instead of running
// itself again, forever.
const clusterExecEnv = "NODEPREP_CLUSTER_EXEC"

// clusterExecutable returns the path of nodeprep-cluster beside this
// executable, or why it cannot be run (fault.ErrUnavailable): not
// there, not a regular file, not executable, or this process is the
// "nodeprep-cluster" that a nodeprep ran (clusterExecEnv).
func clusterExecutable() (string, error) {
	const reinstall = "install it from the same build as nodeprep (make build puts it in bin/, the Nix package in $out/bin)"
	if p := os.Getenv(clusterExecEnv); p != "" {
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: %s, which nodeprep ran for the cluster commands, does not have them: it is a copy of or a link to nodeprep, not %s; %s", p, ClusterExecutable, reinstall))
	}
	self, err := os.Executable()
	if err != nil {
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: finding %s: %w", ClusterExecutable, err))
	}
	p := filepath.Join(filepath.Dir(self), ClusterExecutable)
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: the cluster commands are in %s, which is not installed beside %s (%w): %s", ClusterExecutable, self, err, reinstall))
	case !fi.Mode().IsRegular():
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: %s is %s, not the %s executable: %s", p, bounded.DescribeMode(fi.Mode()), ClusterExecutable, reinstall))
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return "", fault.Unavailable(fmt.Errorf("nodeprep cluster: %s is not executable (mode %s: %w): %s", p, fi.Mode(), err, reinstall))
	}
	return p, nil
}

// forwardCluster replaces this process with nodeprep-cluster when args
// (without the program name) name the cluster stub of root: the command
// itself, its help (`help cluster …`, global flags before or after
// `help`) or a shell's completion request (`__complete cluster …`,
// `__complete help cluster …`). It returns nil when args name something
// else or nodeprep-cluster cannot be run (the stub then says why), and an
// error only when the exec itself fails.
func forwardCluster(root *cobra.Command, args []string) error {
	rest := args
	if len(rest) > 0 && (rest[0] == cobra.ShellCompRequestCmd || rest[0] == cobra.ShellCompNoDescRequestCmd) {
		rest = rest[1:]
	}
	// cobra adds the help command when it executes; Find needs it now.
	root.InitDefaultHelpCmd()
	c, rest, err := root.Find(rest)
	if err == nil && c.Name() == "help" && c.Parent() == root {
		c, _, err = root.Find(rest)
	}
	if err != nil || c.Name() != "cluster" || !c.DisableFlagParsing {
		return nil
	}
	p, err := clusterExecutable()
	if err != nil {
		return nil
	}
	err = syscall.Exec(p, append([]string{p}, args...), append(os.Environ(), clusterExecEnv+"="+p))
	var why string
	switch {
	case errors.Is(err, unix.ENOEXEC):
		why = ": it is not a program this machine can run (built for another architecture, or a script without #!)"
	case errors.Is(err, unix.ENOENT):
		why = ": its interpreter or dynamic loader is missing (built for another system, or a script whose #! names a missing program)"
	}
	return fault.Unavailable(fmt.Errorf("nodeprep cluster: running %s: %w%s; install it from the same build as nodeprep", p, err, why))
}
