package upstream

import (
	"os"
	"path/filepath"
	"testing"
)

// ControlPlane is a program of the control plane started against an
// APIServer by StartScheduler or StartControllerManager.
type ControlPlane struct {
	// Log is the program's log file (stdout and stderr).
	Log string
	// Done is closed when the program exits.
	Done <-chan struct{}
}

// StartScheduler starts the pinned kube-scheduler (tools module
// Kubernetes) against api as a cluster admin, with leader election off,
// no serving port and args (more flags, the later winning), and stops it with t.Cleanup. It binds pods as a
// stock k3s server's embedded scheduler does (the default profile). It
// does not wait: a test waits for what it expects the scheduler to do (a
// pod's spec.nodeName), and reads Log when that does not happen.
func StartScheduler(t testing.TB, api *APIServer, args ...string) *ControlPlane {
	t.Helper()
	prog := filepath.Join(Dir(t, Kubernetes), "kube-scheduler")
	dir := controlPlaneDir(t, "scheduler-")
	kc := api.AdminKubeconfig(t, dir)
	done := start(t, dir, "kube-scheduler", prog, append([]string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--secure-port=0", "--profiling=false",
	}, args...)...)
	return &ControlPlane{Log: filepath.Join(dir, "kube-scheduler.log"), Done: done}
}

// StartControllerManager starts the pinned kube-controller-manager
// (tools module Kubernetes) against api as a cluster admin, with every
// default controller (the Job, ReplicaSet, DaemonSet, node lifecycle,
// service account and token controllers, the root CA publisher), leader
// election off, no serving port, and the service-account signing key and
// CA of api, then args (more flags, the later winning), and stops it with t.Cleanup. It does not wait; see
// StartScheduler.
func StartControllerManager(t testing.TB, api *APIServer, args ...string) *ControlPlane {
	t.Helper()
	prog := filepath.Join(Dir(t, Kubernetes), "kube-controller-manager")
	dir := controlPlaneDir(t, "kcm-")
	kc := api.AdminKubeconfig(t, dir)
	done := start(t, dir, "kube-controller-manager", prog, append([]string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--secure-port=0", "--profiling=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + filepath.Join(api.Dir, "sa.key"),
		"--root-ca-file=" + filepath.Join(api.Dir, "ca.crt"),
	}, args...)...)
	return &ControlPlane{Log: filepath.Join(dir, "kube-controller-manager.log"), Done: done}
}

// controlPlaneDir makes a directory for one program's kubeconfig and log,
// removed with t.Cleanup.
func controlPlaneDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
