package child

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReportFD is the file descriptor of the report pipe in the child (the
// first of exec.Cmd.ExtraFiles). The child writes "report <data>\n" on
// it (ChildReport); the crash handler writes "crash <SIGNAME> <library>\n".
const ReportFD = 3

// idEnv carries a child's random id in its environment and in that of
// everything it starts, so the sweep recognises its descendants.
const idEnv = "NODEPREP_CHILD_ID"

// Defaults of a Spec.
const (
	DefaultGrace = time.Second // Spec.Grace
	drainWait    = 100 * time.Millisecond
	killWait     = time.Second // how long a SIGKILLed process may take to go
)

// MaxReport is the longest report line Run reads, in bytes (8 MiB: an
// NVML inventory of 8 GPUs is about 10 KiB); a longer line is cut there
// and Result.ReportTooLarge is set, so the caller says the report was too
// large instead of failing to decode it.
const MaxReport = 8 << 20

// Spec says how to run one child.
type Spec struct {
	// Path and Args are the command line (Args without the program name).
	Path string
	Args []string
	// Env is the child's environment ("KEY=value"); nil passes this
	// process's environment on. Run adds the child's id to it.
	Env []string
	// Timeout bounds the child from its start to its first report, and
	// from each report to the next when it writes several (a child that
	// runs probes in turn has the timeout for each); at the timeout it is
	// killed with its process group. Required (> 0).
	Timeout time.Duration
	// Grace is how long the child may run after its reports (tearing the
	// driver down) before it is killed (0: DefaultGrace; negative: killed
	// at once, since a driver's teardown is of no use to anyone: the
	// kernel frees what the process held). The reports count either way.
	Grace time.Duration
	// Reports is how many report lines the child writes (0: 1); the grace
	// period starts when they are all in, and further lines are dropped.
	Reports int
	// Output keeps the child's stdout and stderr (one pipe, in the order
	// written); nil keeps the defaults of Capture.
	Output *Capture
}

// Ending says how a child ended.
type Ending string

// The endings.
const (
	EndExited    Ending = "exited"    // it exited by itself (ExitCode)
	EndSignaled  Ending = "signaled"  // a signal it did not expect ended it (Signal)
	EndTimeout   Ending = "timeout"   // killed by Run at Spec.Timeout
	EndCancelled Ending = "cancelled" // killed by Run because the context ended (SIGTERM)
	EndTeardown  Ending = "teardown"  // killed by Run Grace after its reports
	EndReported  Ending = "reported"  // killed by Run right after its reports (Grace < 0)
	EndStuck     Ending = "stuck"     // killed, but did not exit within a second (in the kernel)
	EndNotRun    Ending = "not-run"   // it could not be started (Result.Err)
)

// Crash is what the child's crash handler reported (InstallCrashReport).
type Crash struct {
	Signal  string // "SIGSEGV"
	Library string // the object the fatal frame is in (a path), or "?"
}

// Result is how a child ended and what it said.
type Result struct {
	// Ending says how it ended; ExitCode (EndExited) and Signal
	// (EndSignaled, and the kill signal when Run killed it) go with it.
	Ending   Ending
	ExitCode int
	Signal   syscall.Signal
	// Report is the data of the child's first report line, nil without
	// one; Reports holds every report line's data, in order.
	Report  []byte
	Reports [][]byte
	// Crash is set when the crash handler reported a fatal signal.
	Crash *Crash
	// ReportTooLarge is set when a report line was longer than MaxReport
	// and was cut: the child did not crash, its report is not usable.
	ReportTooLarge bool
	// Output is Spec.Output (what the child printed, bounded).
	Output *Capture
	// Escaped counts the descendants that outlived the child and were
	// killed (a driver's daemon in its own session).
	Escaped int
	// Err is why the child could not be started (EndNotRun).
	Err error
	// Duration is from the start to the end of the child.
	Duration time.Duration
}

// subreaper makes this process adopt its descendants' orphans, once. It
// fails only on kernels before 3.4; the sweep then finds only what stayed
// in the child's tree.
var subreaper sync.Once

// Run starts spec's child in its own process group with the report pipe
// as ReportFD, waits for it within spec.Timeout and ctx, and returns how
// it ended. Run always returns: a child stuck in the kernel is left to
// the kernel (EndStuck). After the child ends, Run kills every
// descendant still alive that carries its id (the process becomes a
// child sub-reaper, PR_SET_CHILD_SUBREAPER, so a daemon that left the
// child's session is reparented here instead of to init), then the rest
// of its process group. Nothing the child prints is kept beyond
// spec.Output's bounds.
func Run(ctx context.Context, spec Spec) *Result {
	subreaper.Do(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
	res := &Result{Output: spec.Output}
	if res.Output == nil {
		res.Output = &Capture{}
	}
	fail := func(err error) *Result {
		res.Ending, res.Err = EndNotRun, err
		return res
	}
	if spec.Timeout <= 0 {
		return fail(errors.New("child: no timeout"))
	}
	grace := spec.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	want := max(spec.Reports, 1)
	id := newID()
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Env = append(cmd.Environ(), idEnv+"="+id) // Environ: Env, or the inherited one
	rr, rw, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("creating the report pipe: %w", err))
	}
	or, ow, err := os.Pipe()
	if err != nil {
		rr.Close()
		rw.Close()
		return fail(fmt.Errorf("creating the output pipe: %w", err))
	}
	cmd.Stdout, cmd.Stderr = ow, ow
	cmd.ExtraFiles = []*os.File{rw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	err = cmd.Start()
	rw.Close()
	ow.Close()
	if err != nil {
		rr.Close()
		or.Close()
		return fail(fmt.Errorf("starting %s: %w", spec.Path, err))
	}
	pid := cmd.Process.Pid
	killGroup := func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }

	outDone := make(chan struct{})
	go func() {
		drain(or, res.Output)
		close(outDone)
	}()
	allEvents := make(chan reportLine, 4)
	go readReports(rr, allEvents)
	events := (<-chan reportLine)(allEvents)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var graceC <-chan time.Time
	var killed Ending
	kill := func(why Ending) {
		if killed == "" {
			killed = why
			killGroup()
		}
	}
	done := ctx.Done()
wait:
	for {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				events = nil
			case ev.crash != nil:
				res.Crash = ev.crash
			case len(res.Reports) < want: // more lines than asked for are dropped
				res.Reports = append(res.Reports, ev.report)
				res.ReportTooLarge = res.ReportTooLarge || ev.cut
				if len(res.Reports) == want {
					if grace < 0 {
						kill(EndReported)
					} else {
						graceC = time.After(grace)
					}
				} else {
					timer.Reset(spec.Timeout) // the next report's time
				}
			}
		case <-exited:
			break wait
		case <-timer.C:
			kill(EndTimeout)
		case <-done:
			kill(EndCancelled)
			done = nil
		case <-graceC:
			kill(EndTeardown)
		}
		if killed != "" {
			select {
			case <-exited:
			case <-time.After(killWait):
				killed = EndStuck
			}
			break wait
		}
	}
	res.Duration = time.Since(start)
	if killed != EndStuck {
		res.Escaped = sweep(id, pid)
		killGroup()
	}
	// Take what is already in the pipes; a write end still held by
	// something that could not be killed does not hold Run.
	_ = rr.SetReadDeadline(time.Now().Add(drainWait))
	_ = or.SetReadDeadline(time.Now().Add(drainWait))
	for ev := range allEvents {
		if ev.crash != nil {
			res.Crash = ev.crash
		} else if len(res.Reports) < want {
			res.Reports = append(res.Reports, ev.report)
			res.ReportTooLarge = res.ReportTooLarge || ev.cut
		}
	}
	if len(res.Reports) > 0 {
		res.Report = res.Reports[0]
	}
	<-outDone
	rr.Close()
	or.Close()

	switch {
	case killed != "":
		res.Ending, res.Signal = killed, syscall.SIGKILL
	case cmd.ProcessState == nil:
		res.Ending = EndStuck
	default:
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.Ending, res.Signal = EndSignaled, ws.Signal()
		} else {
			res.Ending, res.ExitCode = EndExited, ws.ExitStatus()
		}
	}
	return res
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// drain copies r into c with a fixed buffer until EOF or an error (a
// read deadline).
func drain(r *os.File, c *Capture) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		c.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

type reportLine struct {
	report []byte
	cut    bool // the line was longer than MaxReport
	crash  *Crash
}

// readReports sends each line of the report pipe (lines longer than
// MaxReport are cut, and marked) and closes events at EOF or on an error.
func readReports(r *os.File, events chan<- reportLine) {
	defer close(events)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, cut, err := readLine(br, MaxReport)
		if kind, rest, ok := strings.Cut(string(line), " "); ok && (err == nil || len(rest) > 0) {
			switch kind {
			case "report":
				events <- reportLine{report: []byte(strings.TrimSpace(rest)), cut: cut}
			case "crash":
				sig, lib, _ := strings.Cut(strings.TrimSpace(rest), " ")
				events <- reportLine{crash: &Crash{Signal: sig, Library: lib}}
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, keeping at most limit bytes of it; cut says
// that the line (without its newline) was longer.
func readLine(br *bufio.Reader, limit int) (line []byte, cut bool, err error) {
	total := 0
	for {
		part, err := br.ReadSlice('\n')
		total += len(part)
		if len(line) < limit {
			line = append(line, part[:min(len(part), limit-len(line))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == nil {
				total-- // the newline
			}
			return bytes.TrimSuffix(line, []byte("\n")), total > limit, err
		}
	}
}

// sweep kills every process that is a child of this one (a sub-reaper
// gets the orphans of its descendants) and carries id in its
// environment, until none is left, and reaps them. It returns how many it
// killed outside the child's process group pgrp (those are killed with
// the group). A process that scrubbed its environment is not recognised.
//
// A child in the middle of exiting has released its memory (its environ
// cannot be read) but not yet handed its own children over: the sweep
// looks again until no child is in that state, so a daemon whose parent
// was exiting during a scan is found on the next one.
func sweep(id string, pgrp int) int {
	self := os.Getpid()
	want := []byte(idEnv + "=" + id + "\x00")
	killed, quiet := 0, 0
	for range 200 {
		found, exiting := 0, 0
		for _, c := range childrenOf(self) {
			env, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/environ")
			if err != nil || len(env) == 0 {
				if c.state != 'Z' && c.state != 'X' {
					exiting++
				}
				continue
			}
			if !bytes.Contains(append(env, 0), want) {
				continue
			}
			found++
			// One still in the child's group was killed with the group
			// (and is dying): it is reaped, not counted as escaped.
			if syscall.Kill(c.pid, syscall.SIGKILL) == nil && c.pgrp != pgrp {
				killed++
			}
			reap(c.pid)
		}
		// Two quiet scans in a row: a process that finished exiting
		// while it was scanned (listed, then read as a zombie) handed its
		// children over before it became one, so the next scan lists
		// them. Only a process still exiting (its memory gone, not yet a
		// zombie) is waited for: a quiet scan costs no sleep, which is a
		// millisecond off every probe (docs/faults.md, "Self-test speed").
		if found == 0 && exiting == 0 {
			if quiet++; quiet == 2 {
				break
			}
			continue
		}
		quiet = 0
		if exiting > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return killed
}

// reap waits for pid (a child of this process) to exit, up to killWait.
func reap(pid int) {
	deadline := time.Now().Add(killWait)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		if p, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); p == pid || err != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// proc is a process as /proc/<pid>/stat shows it.
type proc struct {
	pid, pgrp int
	state     byte // R, S, D, Z...
}

// childrenOf lists the processes whose parent is ppid (this process):
// from /proc/self/task/*/children, which lists exactly them (an orphan is
// adopted by one of the threads), else, on a kernel without that file
// (CONFIG_PROC_CHILDREN), from every /proc/<pid>/stat. The state comes
// from /proc/<pid>/stat: its third field (the second, the command, may
// hold spaces and parentheses, so the fields are counted after the last
// ')').
func childrenOf(ppid int) []proc {
	var pids []string
	tasks, err := os.ReadDir("/proc/self/task")
	listed := err == nil
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			listed = false
			break
		}
		pids = append(pids, strings.Fields(string(data))...)
	}
	if !listed {
		pids = nil
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return nil
		}
		for _, e := range ents {
			pids = append(pids, e.Name())
		}
	}
	want := strconv.Itoa(ppid)
	var out []proc
	for _, name := range pids {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == ppid {
			continue
		}
		data, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 2 && f[1] == want && len(f[0]) > 0 {
			pgrp, _ := strconv.Atoi(f[2])
			out = append(out, proc{pid: pid, pgrp: pgrp, state: f[0][0]})
		}
	}
	return out
}

// Describe says in a few words how a child ended, for reasons: "timed out
// after 5s and was killed", "crashed: SIGSEGV in /lib/libx.so", "exited
// with status 3".
func (r *Result) Describe(timeout time.Duration) string {
	switch r.Ending {
	case EndTimeout:
		return fmt.Sprintf("did not finish within %s and was killed", timeout)
	case EndCancelled:
		return "cancelled (nodeprep was asked to stop) and killed"
	case EndTeardown:
		return "hung after its report (in driver teardown) and was killed"
	case EndReported:
		return "was stopped after its report"
	case EndStuck:
		return "did not exit after SIGKILL (stuck in the kernel, in the driver)"
	case EndNotRun:
		return fmt.Sprintf("could not be run: %v", r.Err)
	case EndSignaled:
		if r.Crash != nil {
			return fmt.Sprintf("crashed: %s in %s", r.Crash.Signal, r.Crash.Library)
		}
		return fmt.Sprintf("crashed: killed by signal %s", SignalName(r.Signal))
	}
	return fmt.Sprintf("exited with status %d", r.ExitCode)
}

// SignalName names a signal as the kernel headers do ("SIGSEGV"); unknown
// numbers give "signal N".
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// Note is the escaped-descendant and output part of a reason:
// "; 1 descendant outlived it and was killed; output: …" (empty when
// there is nothing to say). The output is the last 2 KiB on one line.
func (r *Result) Note() string {
	var b strings.Builder
	if r.Escaped > 0 {
		fmt.Fprintf(&b, "; %d descendant(s) outlived it and were killed", r.Escaped)
	}
	if s := OneLine(r.Output.String(), 2048); s != "" {
		b.WriteString("; output: " + s)
	}
	return b.String()
}

// OneLine trims s, keeps its last max bytes (marked "…") and joins its
// lines with " | "; control characters become spaces.
func OneLine(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	s = strings.ReplaceAll(s, "\n", " | ")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
