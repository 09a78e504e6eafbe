package app

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: --version and `version` print the same line; -o json has
// the fields.
func TestVersion(t *testing.T) {
	t.Parallel()
	flag, _, code := runCLI(t, "--version")
	if code != ExitOK || !strings.HasPrefix(flag, "nodeprep ") || strings.Count(flag, "\n") != 1 {
		t.Fatalf("--version: exit %d, %q", code, flag)
	}
	cmd, _, _ := runCLI(t, "version")
	if cmd != flag {
		t.Errorf("version prints %q, --version %q", cmd, flag)
	}
	js, _, _ := runCLI(t, "version", "-o", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(js), &v); err != nil || v.Version == "" || v.GoVersion == "" || v.Platform == "" {
		t.Errorf("version -o json = %q (%v)", js, err)
	}
}

// TestVersionFrom: where each field comes from, for every way nodeprep is
// built — make (git describe), the Nix package (its version, the flake's
// rev or dirtyRev), go build in a checkout and go install of a release
// (the build info). The tagged build itself is TestTaggedBuildVersion in
// cmd/nodeprep.
func TestVersionFrom(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name                 string
		linkVersion, linkRev string
		bi                   *debug.BuildInfo
		version, commit      string
		dirty                bool
	}{
		{"make, tagged", "v0.2.0", rev, &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}, Settings: vcs("false")}, "v0.2.0", rev, false},
		{"make, past the tag and modified", "v0.2.0-3-g0123456-dirty", rev, &debug.BuildInfo{Settings: vcs("true")}, "v0.2.0-3-g0123456", rev, true},
		{"make, untagged", "", rev, &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201195000-0123456789ab+dirty"}, Settings: vcs("true")},
			"v0.0.0-20261201195000-0123456789ab", rev, true},
		{"nix package", "0.1.0+0123456", rev, &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0.1.0+0123456", rev, false},
		{"nix package, dirty flake", "0.1.0+0123456-dirty", rev + "-dirty", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0.1.0+0123456", rev, true},
		{"go install of a release", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, "v0.2.0", "", false},
		{"go build, tagged", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}, Settings: vcs("false")}, "v0.2.0", rev, false},
		{"go build, no VCS", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "", false},
		{"no build info", "", "", nil, "dev", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := versionFrom(tt.linkVersion, tt.linkRev, tt.bi)
			if v.Version != tt.version || v.Commit != tt.commit || v.Dirty != tt.dirty {
				t.Errorf("got version %q commit %q dirty %v; want %q %q %v", v.Version, v.Commit, v.Dirty, tt.version, tt.commit, tt.dirty)
			}
		})
	}
	v := versionInfo{Version: "v0.2.0", Commit: rev, Dirty: true, GoVersion: "go1.26.0", Platform: "linux/amd64"}
	if got, want := v.String(), "nodeprep v0.2.0 (commit "+rev+", dirty, go1.26.0, linux/amd64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
