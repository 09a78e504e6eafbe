package app

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at link time: -ldflags "-X github.com/nodeprep/nodeprep/cmd/nodeprep/app.version=v0.1.0 -X ...commit=abc".
var (
	version = "dev"
	commit  = ""
)

type versionInfo struct {
	Version   string `json:"version" yaml:"version"`
	Commit    string `json:"commit" yaml:"commit"`
	GoVersion string `json:"goVersion" yaml:"goVersion"`
	Platform  string `json:"platform" yaml:"platform"`
}

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print nodeprep's version, commit and Go version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			v := versionInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if v.Commit == "" {
				if bi, ok := debug.ReadBuildInfo(); ok {
					for _, s := range bi.Settings {
						if s.Key == "vcs.revision" {
							v.Commit = s.Value
						}
					}
				}
			}
			return g.print(v, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "nodeprep %s (commit %s, %s, %s)\n", v.Version, orNone(v.Commit), v.GoVersion, v.Platform)
				return err
			})
		},
	}
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
