// Package app is nodeprep's command layer: cobra commands that parse flags,
// call one domain function each, and print. It is the only package that
// imports cobra, touches os.Stdout/os.Stderr/os.Args or maps errors to exit
// codes.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// IOStreams are the standard streams a command uses; tests pass buffers.
type IOStreams struct {
	In     io.Reader // standard input
	Out    io.Writer // data: reports in the --output format
	ErrOut io.Writer // logs and error messages
}

// Exit codes (docs/exit-codes.md; the 6x/7x values are sysexits.h's).
const (
	ExitOK          = 0  // ready, or the check passed
	ExitCheckFailed = 1  // fault.ErrCheckFailed, and unmarked errors
	ExitUsage       = 2  // fault.ErrUsage
	ExitMalformed   = 65 // fault.ErrMalformed (EX_DATAERR)
	ExitUnavailable = 69 // fault.ErrUnavailable (EX_UNAVAILABLE)
	ExitCantWrite   = 73 // fault.ErrCantWrite (EX_CANTCREAT)
	ExitLocked      = 75 // fault.ErrLocked (EX_TEMPFAIL)
)

// Main runs nodeprep with the process's arguments and streams and the
// commands of exts beside its own, and returns the exit code. Without a
// "cluster" extension, `nodeprep cluster …` replaces the process with
// nodeprep-cluster (ClusterExecutable) when it is installed beside it.
func Main(exts ...Extension) int {
	args := os.Args[1:]
	streams := IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root, g := newRootCommand(streams, exts...)
	if err := forwardCluster(root, args); err != nil {
		return g.report(err)
	}
	return g.report(execute(root, g, args))
}

// Run runs nodeprep with args (without the program name) and the
// commands of exts. The error, if any, carries a fault kind that ExitCode
// maps to a number. It runs nothing else: without a "cluster" extension,
// `cluster` is the stub that says nodeprep-cluster is not installed.
func Run(args []string, streams IOStreams, exts ...Extension) error {
	root, g := newRootCommand(streams, exts...)
	return execute(root, g, args)
}

// NewRootCommand returns nodeprep's root command with the commands of
// exts, writing to streams, for programs that generate its reference
// (the documentation tests) rather than run it.
func NewRootCommand(streams IOStreams, exts ...Extension) *cobra.Command {
	root, _ := newRootCommand(streams, exts...)
	return root
}

// execute runs root (made with g) with args.
func execute(root *cobra.Command, g *globals, args []string) error {
	root.SetArgs(args)
	// SIGTERM (systemd stopping the unit) and SIGINT cancel the context
	// instead of killing the process, so probe children are killed and the
	// in-container self-test unmounts and removes what it made.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err != nil && !g.started && !isMarked(err) {
		// cobra failed before any command ran: an unknown command, flag or
		// argument.
		err = fault.Usage(err)
	}
	return g.withRootHint(err)
}

// report prints err (if any) once, in the logger's voice, and returns its
// exit code.
func (g *globals) report(err error) int {
	if err == nil {
		return ExitOK
	}
	var silent *silentError
	if !errors.As(err, &silent) {
		if g.structured && g.log != nil {
			g.log.Error(err.Error())
		} else {
			fmt.Fprintf(g.streams.ErrOut, "nodeprep: error: %v\n", err)
		}
	}
	return ExitCode(err)
}

// report prints err to w in text form and returns its exit code (tests).
func report(w io.Writer, err error) int {
	g := &globals{streams: IOStreams{ErrOut: w}}
	return g.report(err)
}

// ExitCode maps an error to nodeprep's exit code by its fault kind; an
// unmarked error is a failed check (1).
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, fault.ErrUsage):
		return ExitUsage
	case errors.Is(err, fault.ErrLocked):
		return ExitLocked
	case errors.Is(err, fault.ErrMalformed):
		return ExitMalformed
	case errors.Is(err, fault.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, fault.ErrCantWrite):
		return ExitCantWrite
	}
	return ExitCheckFailed
}

func isMarked(err error) bool {
	var f *fault.Error
	return errors.As(err, &f)
}

// silentError is an error whose message the command has already printed
// (a check's findings): Main exits with its code and prints nothing more.
type silentError struct{ err error }

// Error is the wrapped error's message.
func (e *silentError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *silentError) Unwrap() error { return e.err }

// silent wraps err so that it is not printed again; nil stays nil.
func silent(err error) error {
	if err == nil {
		return nil
	}
	return &silentError{err: err}
}
