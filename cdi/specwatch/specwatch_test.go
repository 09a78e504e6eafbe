package specwatch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// watch runs Run over dirs of a fresh root with pass, and returns the
// root and a channel of the triggers passes got (the initial one first).
func watch(t *testing.T, dirs []string, mkdirs []string, pass func(Trigger) []Written) (*hostfs.Root, <-chan Trigger) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range mkdirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	host, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Trigger, 100)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Run(ctx, host, dirs, func(_ context.Context, tr Trigger) ([]Written, error) {
			w := pass(tr)
			got <- tr
			return w, nil
		}, Options{Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if tr := <-got; !tr.Initial {
		t.Fatalf("first pass %+v is not the initial one", tr)
	}
	return host, got
}

func next(t *testing.T, got <-chan Trigger) Trigger {
	t.Helper()
	select {
	case tr := <-got:
		return tr
	case <-time.After(10 * time.Second):
		t.Fatal("no pass within 10 s")
		return Trigger{}
	}
}

// none asserts that no pass runs within a while (well past the settle
// time): events that must not start one.
func none(t *testing.T, got <-chan Trigger, why string) {
	t.Helper()
	select {
	case tr := <-got:
		t.Errorf("%s started a pass: %+v", why, tr)
	case <-time.After(20 * DefaultSettle):
	}
}

func rename(t *testing.T, host *hostfs.Root, hostPath, data string) {
	t.Helper()
	p, _ := host.Path(hostPath)
	tmp := filepath.Join(filepath.Dir(p), ".spec-1.tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// TestRunTriggers: the events a path unit with PathChanged= reacts to start
// a pass naming the spec file; a writer's temporary file, another file
// type and a chmod do not.
func TestRunTriggers(t *testing.T) {
	host, got := watch(t, []string{"/var/run/cdi"}, []string{"var/run/cdi"}, func(Trigger) []Written { return nil })
	p, _ := host.Path("/var/run/cdi/a.json")
	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"a rename into place", func() { rename(t, host, "/var/run/cdi/a.json", "{}") }},
		{"an in-place rewrite", func() { os.WriteFile(p, []byte("{ }"), 0o644) }},
		{"a removal", func() { os.Remove(p) }},
		{"a YAML spec", func() { rename(t, host, "/var/run/cdi/b.yaml", "x") }},
	} {
		tc.do()
		tr := next(t, got)
		if tr.Initial || len(tr.Files) != 1 || filepath.Ext(tr.Files[0]) == ".tmp" {
			t.Errorf("%s: trigger %+v", tc.name, tr)
		}
	}
	b, _ := host.Path("/var/run/cdi/b.yaml")
	os.WriteFile(filepath.Join(filepath.Dir(b), "notes.txt"), []byte("x"), 0o644)
	os.Chmod(b, 0o600)
	none(t, got, "a .txt file and a chmod")
}

// TestRunOwnWrite: the event of the pass's own write starts no pass; a
// writer's rename right after it does.
func TestRunOwnWrite(t *testing.T) {
	var host *hostfs.Root
	own := true
	host, got := watch(t, []string{"/run/cdi"}, []string{"run/cdi"}, func(tr Trigger) []Written {
		if tr.Initial || !own {
			return nil
		}
		own = false
		// What hostfs.WriteFile does, with the Stat taken before the rename.
		p, _ := host.Path("/run/cdi/spec.json")
		tmp := p + ".new"
		os.WriteFile(tmp, []byte("patched"), 0o644)
		st, _ := os.Stat(tmp)
		os.Rename(tmp, p)
		return []Written{{Path: "/run/cdi/spec.json", Info: st}}
	})
	rename(t, host, "/run/cdi/spec.json", "plain")
	next(t, got) // the pass that writes
	none(t, got, "the pass's own write")
	rename(t, host, "/run/cdi/spec.json", "plain again")
	if tr := next(t, got); !slices.Equal(tr.Files, []string{"/run/cdi/spec.json"}) {
		t.Errorf("the writer's rename after nodeprep's: trigger %+v", tr)
	}
}

// TestRunEventDuringPass: an event that arrives while a pass runs starts
// another pass after it (systemd would merge it into the running job).
func TestRunEventDuringPass(t *testing.T) {
	var host *hostfs.Root
	first := true
	host, got := watch(t, []string{"/run/cdi"}, []string{"run/cdi"}, func(tr Trigger) []Written {
		if !tr.Initial && first {
			first = false
			rename(t, host, "/run/cdi/claim.yaml", "written during the pass")
		}
		return nil
	})
	rename(t, host, "/run/cdi/base.yaml", "x")
	next(t, got)
	if tr := next(t, got); !slices.Equal(tr.Files, []string{"/run/cdi/claim.yaml"}) {
		t.Errorf("the event during the pass: trigger %+v", tr)
	}
}

// TestRunMissingDirectory: a spec directory that does not exist yet is
// watched through its parents and counts once it appears.
func TestRunMissingDirectory(t *testing.T) {
	host, got := watch(t, []string{"/etc/cdi"}, nil, func(Trigger) []Written { return nil })
	etc := filepath.Join(host.Dir(), "etc")
	if err := os.MkdirAll(filepath.Join(etc, "cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	next(t, got) // the directory appeared: everything in it is new
	rename(t, host, "/etc/cdi/k8s.gpu.nvidia.com-device_base.yaml", "x")
	if tr := next(t, got); !slices.Equal(tr.Files, []string{"/etc/cdi/k8s.gpu.nvidia.com-device_base.yaml"}) {
		t.Errorf("a spec in the new directory: trigger %+v", tr)
	}
}

// TestSpecFile: the names the CDI library loads.
func TestSpecFile(t *testing.T) {
	for name, want := range map[string]bool{"a.json": true, "a.yaml": true, "a.yml": false, ".a.json123": false, "spec-1.tmp": false, "a.json.tmp": false} {
		if SpecFile(name) != want {
			t.Errorf("SpecFile(%q) = %v", name, !want)
		}
	}
}
