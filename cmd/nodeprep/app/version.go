package app

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set at link time (the Makefile from `git describe --tags --dirty`, the
// Nix package from its version and the flake's revision):
// -ldflags "-X github.com/nodeprep/nodeprep/cmd/nodeprep/app.version=v0.1.0 -X ...commit=abc".
// Left empty, the build info the Go toolchain stamps says them.
var (
	version = ""
	commit  = ""
)

type versionInfo struct {
	// Version is the release: a tag (v0.2.0), a Go pseudo-version for an
	// untagged commit, the Nix package's version, or "dev" when nothing
	// says.
	Version string `json:"version" yaml:"version"`
	// Commit is the full revision the binary was built from; "" when
	// unknown.
	Commit string `json:"commit" yaml:"commit"`
	// Dirty: the tree had uncommitted changes at build time.
	Dirty     bool   `json:"dirty" yaml:"dirty"`
	GoVersion string `json:"goVersion" yaml:"goVersion"`
	Platform  string `json:"platform" yaml:"platform"`
}

// currentVersion is the version information of this binary.
func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(version, commit, bi)
}

// versionFrom resolves the version information from the link-time
// version and commit and the Go toolchain's build info (nil when absent):
// a link-time value wins; else the main module's version, which since Go
// 1.24 `go build` derives from the commit's tag (a pseudo-version when
// untagged, "+dirty" when modified) and `go install …@v0.2.0` sets, and
// the vcs.revision and vcs.modified settings. A "-dirty"/"+dirty" suffix
// (git describe --dirty, Go, the flake's dirtyRev) becomes Dirty.
func versionFrom(linkVersion, linkCommit string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: linkVersion, Commit: linkCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" {
					v.Dirty = true
				}
			}
		}
	}
	v.Version, v.Dirty = trimDirty(v.Version, v.Dirty)
	v.Commit, v.Dirty = trimDirty(v.Commit, v.Dirty)
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

// trimDirty removes a "-dirty" or "+dirty" suffix from s and reports it
// in dirty.
func trimDirty(s string, dirty bool) (string, bool) {
	for _, suffix := range []string{"-dirty", "+dirty"} {
		if t, ok := strings.CutSuffix(s, suffix); ok {
			return t, true
		}
	}
	return s, dirty
}

// String is the one line `nodeprep version` and `nodeprep --version` print:
// "nodeprep v0.2.0 (commit 1a2b…, dirty, go1.26.0, linux/amd64)".
func (v versionInfo) String() string {
	dirty := ""
	if v.Dirty {
		dirty = ", dirty"
	}
	return fmt.Sprintf("nodeprep %s (commit %s%s, %s, %s)", v.Version, orNone(v.Commit), dirty, v.GoVersion, v.Platform)
}

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print nodeprep's version, commit and Go version",
		Long: `version prints nodeprep's release version (the tag it was built from, or Go's
pseudo-version for an untagged commit), the commit, whether the tree had
uncommitted changes ("dirty"), the Go version and the platform; -o json and
-o yaml print the same as fields. 'nodeprep --version' prints the same line.`,
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
