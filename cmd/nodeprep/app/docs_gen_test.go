package app_test

// The generated reference lives in a test file so that cobra/doc (and the
// Markdown and roff libraries it links) stay out of the nodeprep binary:
// each linked package's init costs every nodeprep process, the probe
// children included, start-up time. The pages are checked in under
// docs/cli and docs/man/man1; TestDocsUpToDate fails when they go stale, and
// package.nix and `make install` install docs/man/man1 from the source.

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/cmd/nodeprep/clustercmd"
)

// manDate is the date the man pages carry: fixed, so the pages checked in
// under docs/man/man1 and those package.nix generates at build time are the
// same bytes (cobra would otherwise stamp today's date).
var manDate = time.Date(2026, time.November, 1, 0, 0, 0, 0, time.UTC)

// generateDocs writes the command reference generated from the cobra
// commands themselves: one Markdown page per command under markdownDir
// (docs/cli) and one man page per command, section 1, under manDir
// (docs/man/man1, the layout MANPATH and man(1) expect); an empty directory name skips that form. The output is the
// same on every machine: no dates, and host-dependent defaults (--arch)
// spelled out in words.
func generateDocs(markdownDir, manDir string) error {
	// The whole tree: nodeprep-cluster's, whose cluster commands the
	// nodeprep binary runs (app.ClusterExecutable).
	root := app.NewRootCommand(app.IOStreams{}, clustercmd.New)
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd() // cobra adds it only when executing
	hostIndependentDefaults(root)
	if markdownDir != "" {
		if err := os.MkdirAll(markdownDir, 0o755); err != nil {
			return err
		}
		if err := doc.GenMarkdownTree(root, markdownDir); err != nil {
			return fmt.Errorf("writing the Markdown reference to %s: %w", markdownDir, err)
		}
	}
	if manDir != "" {
		if err := os.MkdirAll(manDir, 0o755); err != nil {
			return err
		}
		header := &doc.GenManHeader{Title: "NODEPREP", Section: "1", Source: "nodeprep", Manual: "nodeprep manual", Date: &manDate}
		if err := doc.GenManTree(root, header, manDir); err != nil {
			return fmt.Errorf("writing man pages to %s: %w", manDir, err)
		}
	}
	return nil
}

// hostIndependentDefaults replaces defaults that depend on the machine
// the docs are generated on (--arch is the build's GOARCH) with words.
func hostIndependentDefaults(c *cobra.Command) {
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "arch" {
			f.DefValue = "the host's"
		}
	})
	for _, sub := range c.Commands() {
		hostIndependentDefaults(sub)
	}
}
