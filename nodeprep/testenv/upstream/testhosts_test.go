package upstream

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestRealTestHosts regenerates the host trees under testdata/hosts with
// scripts/gen-testhosts.sh into a temporary directory and wants every tree
// it writes to equal the committed one: the NixOS trees' CDI specs are the
// output of the pinned nvidia-ctk (both toolkits) run as NixOS's generator
// units run it (scripts/nvidia-cdi-generate.sh), so a committed spec that
// differs from what the pinned generator writes fails here.
func TestRealTestHosts(t *testing.T) {
	if os.Geteuid() != 0 {
		Unavailable(t, errors.New("regenerating the host trees runs nvidia-ctk chrooted, which needs root"))
	}
	for _, tk := range Toolkits {
		Dir(t, tk)
	}
	repo := testkit.RepoRoot(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repo, "scripts", "gen-testhosts.sh"))
	cmd.Env = append(os.Environ(), "HOSTS_DIR="+out, "TMPDIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/gen-testhosts.sh: %v\n%s", err, b)
	}
	_, list, ok := strings.Cut(string(b), "generated: ")
	trees := strings.Fields(list)
	if !ok || len(trees) < 4 {
		t.Fatalf("scripts/gen-testhosts.sh named no trees:\n%s", b)
	}
	for _, tree := range trees {
		diff, err := exec.Command("diff", "-r", "--no-dereference", testkit.Testdata(t, "hosts", tree), filepath.Join(out, tree)).CombinedOutput()
		if err != nil {
			t.Errorf("testdata/hosts/%s differs from what scripts/gen-testhosts.sh writes with the pinned toolkits (run it as root to regenerate):\n%.4000s", tree, diff)
		}
	}
}
