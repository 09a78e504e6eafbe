package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// K3sRunc is where k3s keeps its bundled runc on a k3s node.
const K3sRunc = "/var/lib/rancher/k3s/data/current/bin/runc"

// ErrRuntimeMissing is wrapped by FindRuntime's error when no OCI runtime
// was found.
var ErrRuntimeMissing = errors.New("no OCI runtime")

// FindRuntime returns the OCI runtime's path: name when it has a slash (it
// must be an executable file), else name looked up in PATH; with name "",
// runc from PATH, else crun from PATH, else k3s's bundled runc (K3sRunc).
// The error wraps ErrRuntimeMissing and is marked fault.ErrUnavailable.
func FindRuntime(name string) (string, error) {
	if name != "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fault.Unavailable(fmt.Errorf("%w: OCI runtime %q: %w", ErrRuntimeMissing, name, err))
		}
		return p, nil
	}
	for _, n := range []string{"runc", "crun", K3sRunc} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fault.Unavailable(fmt.Errorf("%w: neither runc nor crun is in PATH and %s does not exist (install runc, or pass --oci-runtime)", ErrRuntimeMissing, K3sRunc))
}

// Runtime runs containers with an OCI runtime's command line (runc and crun
// share it: run --bundle, kill, delete --force), keeping their state in its
// own directory so that it never sees or touches another engine's
// containers.
type Runtime struct {
	// Path is the runtime's executable.
	Path string
	// StateDir is the runtime's --root: where it keeps container state.
	StateDir string
	// Log receives debug detail (commands, their stderr).
	Log *slog.Logger
	// Via is the program a runtime handler names in place of the runtime
	// (the NVIDIA container runtime: it edits the bundle's config.json on
	// "create" only, then execs the low-level runtime it finds in PATH,
	// nvidia-container-toolkit internal/oci/args.go). When set, Run
	// creates the container with Via and starts it with Path, as
	// containerd's runc shim does, instead of "run".
	Via string
	// ViaEnv is Via's environment (nil: nodeprep's).
	ViaEnv []string
}

// RunError is a runtime command that failed: the command line, what it
// printed on stderr, and the cause. It unwraps to the cause.
type RunError struct {
	Command []string // the runtime's command line
	Stderr  string   // what it printed on stderr (at most 64 KiB)
	Err     error    // the cause
}

// Error says the command, the cause and the stderr on one line.
func (e *RunError) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Command, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + oneLine(s)
	}
	return msg
}

// Unwrap returns the cause.
func (e *RunError) Unwrap() error { return e.Err }

func (r *Runtime) command(args ...string) *exec.Cmd {
	return exec.Command(r.Path, append([]string{"--root", r.StateDir}, args...)...)
}

// Outcome is what a probe container printed and how it ended.
type Outcome struct {
	// Report is the probe's report line without its prefix; nil when it
	// printed none.
	Report []byte
	// Other is the rest of stdout (at most 64 KiB), Stderr the runtime's
	// and the probe's stderr (at most 64 KiB).
	Other, Stderr []byte
	// TimedOut is true when the container was killed at the deadline.
	TimedOut bool
	// ExitCode is the runtime's exit status (the container's, or 128+signal
	// when the probe was killed by one); -1 when unknown.
	ExitCode int
	// Err is a failure to start the runtime at all.
	Err error
}

// Run runs the container of bundle (config.json inside) as id in the
// foreground, reads the first stdout line that starts with prefix, and
// waits for the runtime to exit. At ctx's end it kills the container
// (kill id KILL), then the runtime itself if it does not exit within two
// seconds. The container is always deleted (delete --force) before Run
// returns.
func (r *Runtime) Run(ctx context.Context, bundle, id, prefix string) Outcome {
	out := Outcome{ExitCode: -1}
	defer r.Delete(id)
	if r.Via != "" {
		return r.runVia(ctx, bundle, id, prefix)
	}
	cmd := r.command("run", "--bundle", bundle, id)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		out.Err = fmt.Errorf("starting %s: %w", r.Path, err)
		return out
	}
	stderr := &child.Capture{Head: 32 << 10, Tail: 32 << 10}
	cmd.Stderr = stderr
	// The runtime dies with nodeprep; its container is then reaped by
	// the next Delete of the same state directory or by a reboot.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		out.Err = &RunError{Command: cmd.Args, Err: err}
		return out
	}
	type read struct{ report, other []byte }
	readc := make(chan read, 1)
	go func() {
		rep, other, _ := selftest.ReadReport(stdout, prefix)
		_, _ = io.Copy(io.Discard, stdout) // let the probe finish writing
		readc <- read{rep, other}
	}()
	waitc := make(chan error, 1)
	go func() {
		rd := <-readc
		out.Report, out.Other = rd.report, rd.other
		waitc <- cmd.Wait()
	}()
	var werr error
	select {
	case werr = <-waitc:
	case <-ctx.Done():
		out.TimedOut = true
		r.Kill(id)
		select {
		case werr = <-waitc:
		case <-time.After(2 * time.Second):
			// The runtime did not go: kill it, and close our end of the pipe
			// so the reader returns even if a container process still holds
			// the other end open.
			_ = cmd.Process.Kill()
			_ = stdout.Close()
			select {
			case werr = <-waitc:
			case <-time.After(5 * time.Second):
				werr = fmt.Errorf("%s did not exit after SIGKILL", r.Path)
			}
		}
	}
	out.Stderr = []byte(stderr.String())
	var ee *exec.ExitError
	switch {
	case werr == nil:
		out.ExitCode = 0
	case errors.As(werr, &ee):
		out.ExitCode = ee.ExitCode()
	default:
		out.Err = &RunError{Command: cmd.Args, Stderr: stderr.String(), Err: werr}
	}
	if r.Log != nil {
		r.Log.Debug("probe container finished", "id", id, "ms", float64(time.Since(start).Microseconds())/1000,
			"exit", out.ExitCode, "timedOut", out.TimedOut, "report", out.Report != nil, "stderr", strings.TrimSpace(stderr.String()))
	}
	return out
}

// Kill sends SIGKILL to the container's processes; errors (the container
// has already gone) are only logged.
func (r *Runtime) Kill(id string) {
	r.quiet(5*time.Second, "kill", id, "KILL")
}

// Delete removes the container and its state, killing what still runs
// (delete --force); errors (it is already gone) are only logged.
func (r *Runtime) Delete(id string) {
	r.quiet(10*time.Second, "delete", "--force", id)
}

func (r *Runtime) quiet(limit time.Duration, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Path, append([]string{"--root", r.StateDir}, args...)...)
	out := &child.Capture{Head: 4 << 10, Tail: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil && r.Log != nil {
		r.Log.Debug("OCI runtime cleanup", "command", strings.Join(cmd.Args, " "), "err", err, "output", strings.TrimSpace(out.String()))
	}
}

// Version returns the first line of the runtime's `--version`.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, r.Path, "--version")
	stdout, stderr := &child.Capture{Head: 4 << 10, Tail: 1}, &child.Capture{Head: 32 << 10, Tail: 32 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return "", &RunError{Command: cmd.Args, Stderr: stderr.String(), Err: err}
	}
	line, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "\n")
	return line, nil
}

// oneLine is the last 400 bytes of s on one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	if s == "" {
		return "(none)"
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// executable reports whether p is an executable regular file.
func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// absExecutable returns p made absolute.
func absExecutable(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if !executable(a) {
		return "", fmt.Errorf("%s is not an executable file", a)
	}
	return a, nil
}

// runVia is Run through Via: "Via create" with the container's stdio on
// a pipe (the runtime passes its own stdio to the container), "Path
// start", the report read from the pipe until the container closes it.
// The container's exit status is not known this way (ExitCode -1 unless a
// step fails): the report, or its absence, is the outcome.
func (r *Runtime) runVia(ctx context.Context, bundle, id, prefix string) Outcome {
	out := Outcome{ExitCode: -1}
	pr, pw, err := os.Pipe()
	if err != nil {
		out.Err = fmt.Errorf("a pipe for the container's output: %w", err)
		return out
	}
	defer pr.Close()
	// The container inherits create's stdout and stderr: both must be
	// files, or waiting for create would wait for the container's end.
	errFile, err := os.CreateTemp(bundle, "stderr-")
	if err != nil {
		pw.Close()
		out.Err = fmt.Errorf("a file for the container's stderr: %w", err)
		return out
	}
	defer errFile.Close()
	stderr := &child.Capture{Head: 32 << 10, Tail: 32 << 10}
	collect := func() []byte {
		if _, err := errFile.Seek(0, io.SeekStart); err == nil {
			_, _ = io.Copy(stderr, errFile)
		}
		return []byte(stderr.String())
	}
	create := exec.CommandContext(ctx, r.Via, "--root", r.StateDir, "create", "--bundle", bundle, id)
	create.Env = r.ViaEnv
	create.Stdout, create.Stderr = pw, errFile
	create.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = create.Run()
	pw.Close()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out.ExitCode = ee.ExitCode()
			out.Stderr = collect()
			return out
		}
		out.Err = &RunError{Command: create.Args, Stderr: string(collect()), Err: err}
		return out
	}
	readc := make(chan [2][]byte, 1)
	go func() {
		rep, other, _ := selftest.ReadReport(pr, prefix)
		_, _ = io.Copy(io.Discard, pr)
		readc <- [2][]byte{rep, other}
	}()
	start := r.command("start", id)
	startErr := &child.Capture{Head: 4 << 10, Tail: 4 << 10}
	start.Stderr = startErr
	if err := start.Run(); err != nil {
		out.Err = &RunError{Command: start.Args, Stderr: startErr.String(), Err: err}
		return out
	}
	select {
	case rd := <-readc:
		out.Report, out.Other = rd[0], rd[1]
		if out.Report != nil {
			out.ExitCode = 0
		}
	case <-ctx.Done():
		out.TimedOut = true
		r.Kill(id)
		pr.Close()
	}
	out.Stderr = collect()
	return out
}
