package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// NodeReportCommand is the hidden command of nodeprep-cluster
// (cmd/nodeprep/nodecmd) that sets nodeprep's condition and label on this
// node's Node with the kubelet's credential. health and up run it with
// their verdict: it needs net/http and crypto/tls, which this binary
// leaves out so that its start-up at every boot stays small.
const NodeReportCommand = "node-report"

// How long a Node report may take: from health (the timer's run, which
// holds the host lock meanwhile) and from up (at boot, where it must not
// hold up k3s).
const (
	nodeReportTimeout     = 10 * time.Second
	nodeReportBootTimeout = 3 * time.Second
)

// nodeReportFlags are the flags health and up share for the Node report.
type nodeReportFlags struct {
	kubeconfig string
	off        bool
}

func (o *nodeReportFlags) add(f *pflag.FlagSet) {
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "host path of the kubelet's kubeconfig to report the verdict to this node's Node with (default <k3s data-dir>/agent/kubelet.kubeconfig)")
	f.BoolVar(&o.off, "no-node-report", false, "do not set the "+"GPUUnhealthy condition and the nodeprep.dev/gpu-ready label on this node's Node")
}

// reportNode tells this node's Node the verdict of rep through
// nodeprep-cluster node-report, when the kubelet's kubeconfig exists (the
// node has registered). dataDir is k3s's effective data-dir ("" when not
// known: it is read from k3s's configuration). Nothing it meets changes
// the verdict or the exit status: a failure is logged as a warning (at
// boot, where k3s, and with it the API server or the agent's load
// balancer, is not running yet, as a note), and the next run (the health
// timer) tries again.
func reportNode(ctx context.Context, g *globals, o *nodeReportFlags, rep *nodeprep.Report, dataDir string, boot bool) {
	if rep == nil || o.off {
		return
	}
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		if dataDir == "" {
			dataDir = k3sDataDir(g)
		}
		kubeconfig = path.Join(dataDir, "agent", "kubelet.kubeconfig")
	}
	if _, err := g.host.Lstat(kubeconfig); errors.Is(err, fs.ErrNotExist) {
		g.log.Debug("the node has not registered: no kubelet kubeconfig", "kubeconfig", kubeconfig)
		return
	}
	failed := g.log.Warn
	timeout := nodeReportTimeout
	if boot {
		failed, timeout = g.log.Info, nodeReportBootTimeout
	}
	exe, err := clusterExecutable()
	if err != nil {
		failed("the Node was not told the verdict (the next run tries again)", "error", err)
		return
	}
	ready, stage := rep.Ready, ""
	for _, s := range rep.Stages {
		if s.Status == nodeprep.StatusFailed {
			stage = s.Name
			break
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	args := []string{"--root", g.rootDir, "-q", "-o", "json"}
	if g.configPath != "" {
		args = append(args, "--config", g.configPath)
	}
	cmd := exec.CommandContext(ctx, exe, append(args, NodeReportCommand,
		"--kubeconfig", kubeconfig, fmt.Sprintf("--ready=%t", ready), "--failed-stage="+stage,
		"--message", rep.Verdict, "--timeout", timeout.String())...)
	cmd.Env = append(os.Environ(), clusterExecEnv+"="+exe)
	// The child dies with nodeprep: a SIGTERM cancels ctx, which kills it,
	// but a SIGKILL (timeout -k, systemd's last resort, the OOM killer)
	// gives nodeprep no chance to, and the report would go on, holding a
	// connection, up to its own timeout after nodeprep's run ended.
	// Linux sends it when the thread that forked the child ends
	// (prctl(2), PR_SET_PDEATHSIG): this goroutine keeps its thread until
	// the child is waited for.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		failed("the Node was not told the verdict (the next run tries again)", "kubeconfig", kubeconfig, "error", err, "output", logText(stderr.String()))
		return
	}
	g.log.Info("told the Node", "ready", ready, "ms", time.Since(start).Milliseconds(), "result", logText(stdout.String()))
	// What of the kubeconfig node-report does not support (its -q
	// keeps its own warnings off its stderr).
	var res struct{ Warnings []string }
	if json.Unmarshal(stdout.Bytes(), &res) == nil {
		for _, w := range res.Warnings {
			g.log.Warn("the kubelet's kubeconfig asks for what nodeprep does not do", "warning", logText(w))
		}
	}
}

// maxLogText is how much of node-report's output one log line of health
// or up keeps: its error names the request and the API server's message,
// a few hundred bytes.
const maxLogText = 1024

// logText is a child's output for one log line: the start of it, up to
// maxLogText bytes (at a rune boundary), with how much was left out, so
// that an API server's long error body cannot make a log line of
// megabytes at every run.
func logText(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxLogText {
		return s
	}
	end := maxLogText
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s … (%d bytes more)", s[:end], len(s)-end)
}

// k3sDataDir is k3s's effective data-dir as the join settings of the
// config file give it (k3s's files, environment file and arguments), or
// k3s.DefaultDataDir when they cannot be read.
func k3sDataDir(g *globals) string {
	cfg := g.cfg.Join
	base := map[string]string{}
	for _, k := range []string{k3s.EnvConfigFile, k3s.EnvDataDir} {
		if v := os.Getenv(k); v != "" {
			base[k] = v
		}
	}
	env, err := k3s.LoadEnvironment(g.host, cfg.K3sEnvironmentFile, base)
	if err == nil {
		var v *k3s.View
		if v, err = k3s.Read(g.host, k3s.Options{ConfigPath: cfg.K3sConfig, DataDir: cfg.K3sDataDir, Env: env, K3sArgs: cfg.K3sArgs}); err == nil {
			return v.DataDir
		}
	}
	g.log.Debug("k3s's data-dir from its configuration", "error", err, "using", k3s.DefaultDataDir)
	return k3s.DefaultDataDir
}
