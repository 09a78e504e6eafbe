package nodeprep

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// raceRuns is how many runs each race test makes: NODEPREP_RACE_RUNS, else
// 20 (bounded for CI; the numbers in docs/faults.md come from 200).
func raceRuns(t *testing.T) int {
	if s := os.Getenv("NODEPREP_RACE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("NODEPREP_RACE_RUNS=%q: want a positive count", s)
		}
		return n
	}
	return 20
}

// TestUpRenameRaceWritesNothingOutside: while lock + up run (the spec
// patched, the drop-in, status and metrics written), another goroutine
// keeps swapping a directory nodeprep writes into (/run/nodeprep, the k3s
// drop-in directory) for an absolute symlink to a directory outside the
// root and back: the real directory is renamed aside, the link put in its
// place, then the directory renamed back. Every write goes through a
// directory handle opened once inside the root, so nothing may ever
// appear in the outside directory, whatever each run's verdict.
func TestUpRenameRaceWritesNothingOutside(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"/run/nodeprep", "/etc/rancher/k3s/config.yaml.d"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			runs := raceRuns(t)
			host := upHost(t, "nixos-h200")
			outside := t.TempDir()
			real, err := host.Path(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(real, 0o755); err != nil {
				t.Fatal(err)
			}
			// The link waits beside the directory; renameat2's
			// RENAME_EXCHANGE swaps the two names atomically, so the path
			// always names one of them and the racer never stalls.
			link := real + ".link"
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var swaps atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if err := unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
						t.Errorf("swapping %s: %v", real, err)
						return
					}
					time.Sleep(20 * time.Microsecond)
					if err := unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
						t.Errorf("swapping %s back: %v", real, err)
						return
					}
					swaps.Add(1)
					time.Sleep(20 * time.Microsecond)
				}
			}()
			escaped, ok := 0, 0
			seen := map[string]bool{}
			for i := range runs {
				opts := upOptions(simulated("dgx-h200"), nil)
				opts.Selftest = []selftest.Option{selftest.WithCommand("/bin/false")}
				opts.OnSelftestFailure = nodepolicy.PolicyTaint
				unlock, lerr := host.Lock(context.Background(), time.Second)
				rep, err := Up(context.Background(), host, opts)
				if lerr == nil {
					_ = unlock()
				}
				if err == nil && rep.Ready {
					ok++
				} else if testing.Verbose() && rep != nil {
					t.Logf("run %d: lock %v; %s", i, lerr, rep.Verdict)
				}
				ents, _ := os.ReadDir(outside)
				if len(ents) > 0 {
					escaped++
					for _, e := range ents {
						if !seen[e.Name()] {
							seen[e.Name()] = true
							t.Logf("run %d wrote %s outside the root (lock err %v, up err %v)", i, e.Name(), lerr, err)
						}
						_ = os.RemoveAll(filepath.Join(outside, e.Name()))
					}
				}
			}
			cancel()
			wg.Wait()
			t.Logf("%s: %d runs, %d swaps, %d exited ready, %d wrote outside the root", dir, runs, swaps.Load(), ok, escaped)
			if escaped > 0 {
				t.Errorf("%d of %d runs wrote outside the root: %v", escaped, runs, keys(seen))
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
