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

// currentVersion is the version information of this binary: the link-time
// version and commit, else the commit the Go toolchain stamped.
func currentVersion() versionInfo {
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
	return v
}

// String is the one line `nodeprep version` and `nodeprep --version` print.
func (v versionInfo) String() string {
	return fmt.Sprintf("nodeprep %s (commit %s, %s, %s)", v.Version, orNone(v.Commit), v.GoVersion, v.Platform)
}

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print nodeprep's version, commit and Go version",
		Long: `version prints nodeprep's version, the commit it was built from, the Go
version and the platform; -o json and -o yaml print the same as fields.
'nodeprep --version' prints the same line.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			v := currentVersion()
			return g.print(v, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, v)
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
