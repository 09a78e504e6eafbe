package specwatch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

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

// patcher is a pass that "patches" every spec file in the host directory
// dir: a file that does not read "patched" is replaced by one that does,
// renamed into place, and reported as the pass's own write.
func patcher(host *hostfs.Root, dir string) Pass {
	return func(context.Context, Trigger) ([]Written, error) {
		p, err := host.Path(dir)
		if err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, nil // no directory: nothing to patch
		}
		var wrote []Written
		for _, e := range entries {
			if !SpecFile(e.Name()) {
				continue
			}
			f := filepath.Join(p, e.Name())
			if data, _ := os.ReadFile(f); string(data) == "patched" {
				continue
			}
			tmp := filepath.Join(p, ".patch.tmp")
			if err := os.WriteFile(tmp, []byte("patched"), 0o644); err != nil {
				return wrote, err
			}
			st, _ := os.Stat(tmp)
			if err := os.Rename(tmp, f); err != nil {
				return wrote, err
			}
			wrote = append(wrote, Written{Path: filepath.Join(dir, e.Name()), Info: st})
		}
		return wrote, nil
	}
}

// runWatch runs Run over the host directory dir of root with pass until
// the test ends; it returns once the initial pass has run.
func runWatch(t *testing.T, root string, dir string, pass Pass, opts Options) *hostfs.Root {
	t.Helper()
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	initial := make(chan struct{})
	var once bool
	go func() {
		done <- Run(ctx, host, []string{dir}, func(ctx context.Context, tr Trigger) ([]Written, error) {
			w, err := pass(ctx, tr)
			if !once {
				once = true
				close(initial)
			}
			return w, err
		}, opts)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-initial:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return host
}

// writeSpec renames a spec reading "plain" into place, as a writer does.
func writeSpec(t *testing.T, file string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(file), ".writer.tmp")
	if err := os.WriteFile(tmp, []byte("plain"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// patched waits until file reads "patched"; it fails the test when that
// has not happened after 10 s (a watcher that went deaf never gets there).
func patched(t *testing.T, file, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if data, _ := os.ReadFile(file); string(data) == "patched" {
			return
		}
	}
	data, _ := os.ReadFile(file)
	t.Fatalf("%s: %s reads %q, never patched: the watcher went deaf", what, file, data)
}

// TestRunDirectorySwaps: the spec directory removed and recreated, moved
// away and replaced, replaced by a link to a new directory, or a link
// re-pointed to another directory: the watcher keeps watching what the
// path names. After each swap the spec written into the new directory is
// patched (the pass after re-arming), and so is the next one written
// there (the new directory's own watch).
func TestRunDirectorySwaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string) // before the watcher starts
		swap  func(t *testing.T, root string) // the new directory is root/run/cdi's target after it
	}{
		{"removed and recreated", nil, func(t *testing.T, root string) {
			must(t, os.RemoveAll(filepath.Join(root, "run/cdi")))
			must(t, os.Mkdir(filepath.Join(root, "run/cdi"), 0o755))
		}},
		{"moved away and replaced", nil, func(t *testing.T, root string) {
			must(t, os.Rename(filepath.Join(root, "run/cdi"), filepath.Join(root, "run/cdi.old")))
			must(t, os.Mkdir(filepath.Join(root, "run/cdi"), 0o755))
		}},
		{"replaced by a link to a new directory", nil, func(t *testing.T, root string) {
			must(t, os.RemoveAll(filepath.Join(root, "run/cdi")))
			must(t, os.MkdirAll(filepath.Join(root, "srv/cdi-b"), 0o755))
			must(t, os.Symlink("../srv/cdi-b", filepath.Join(root, "run/cdi")))
		}},
		{"link re-pointed", func(t *testing.T, root string) {
			must(t, os.RemoveAll(filepath.Join(root, "run/cdi")))
			must(t, os.MkdirAll(filepath.Join(root, "srv/cdi-a"), 0o755))
			must(t, os.Symlink("/srv/cdi-a", filepath.Join(root, "run/cdi")))
		}, func(t *testing.T, root string) {
			// ln -sfn: a new link renamed over the old one.
			must(t, os.MkdirAll(filepath.Join(root, "srv/cdi-b"), 0o755))
			must(t, os.Symlink("/srv/cdi-b", filepath.Join(root, "run/.cdi.new")))
			must(t, os.Rename(filepath.Join(root, "run/.cdi.new"), filepath.Join(root, "run/cdi")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(root, "run/cdi"), 0o755))
			if tc.setup != nil {
				tc.setup(t, root)
			}
			var host *hostfs.Root
			pass := func(ctx context.Context, tr Trigger) ([]Written, error) { return patcher(host, "/run/cdi")(ctx, tr) }
			host, _ = hostfs.New(root)
			runWatch(t, root, "/run/cdi", pass, Options{})
			// Where /run/cdi is now, its links followed inside the root.
			spec := func(name string) string {
				p, err := host.Path("/run/cdi/" + name)
				must(t, err)
				return p
			}
			writeSpec(t, spec("before.json"))
			patched(t, spec("before.json"), "before the swap")

			tc.swap(t, root)
			writeSpec(t, spec("a.json"))
			patched(t, spec("a.json"), "the spec written right after the swap")
			writeSpec(t, spec("b.yaml"))
			patched(t, spec("b.yaml"), "a spec written later")
		})
	}
}

// TestRunDirectoryRemovedThenCreatedLater: a spec directory removed is
// watched through its parent until it comes back, however late.
func TestRunDirectoryRemovedThenCreatedLater(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755))
	var host *hostfs.Root
	host, _ = hostfs.New(root)
	runWatch(t, root, "/etc/cdi", func(ctx context.Context, tr Trigger) ([]Written, error) { return patcher(host, "/etc/cdi")(ctx, tr) }, Options{})
	must(t, os.RemoveAll(filepath.Join(root, "etc")))
	time.Sleep(50 * DefaultSettle) // the removal's pass runs with nothing there
	must(t, os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755))
	writeSpec(t, filepath.Join(root, "etc/cdi/a.json"))
	patched(t, filepath.Join(root, "etc/cdi/a.json"), "a spec in the directory made again")
}

// TestRunRetriesFailedPass: a pass that fails is run again, with the same
// trigger and a retry count, until it succeeds; an error the caller says
// is not worth retrying waits for the next event.
func TestRunRetriesFailedPass(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "run/cdi"), 0o755))
	got := make(chan Trigger, 100)
	fails := 2
	permanent := errors.New("permanent")
	failWith := make(chan error, 1) // the next pass's error
	runWatch(t, root, "/run/cdi", func(_ context.Context, tr Trigger) ([]Written, error) {
		defer func() { got <- tr }()
		if tr.Initial {
			return nil, nil
		}
		select {
		case err := <-failWith:
			return nil, err
		default:
		}
		if fails > 0 {
			fails--
			return nil, errors.New("lock held")
		}
		return nil, nil
	}, Options{Retryable: func(err error) bool { return !errors.Is(err, permanent) }})
	<-got // the initial pass
	writeSpec(t, filepath.Join(root, "run/cdi/a.json"))
	for want := range 3 {
		tr := next(t, got)
		if tr.Retry != want || !slices.Equal(tr.Files, []string{"/run/cdi/a.json"}) {
			t.Errorf("pass %d: trigger %+v, want retry %d of /run/cdi/a.json", want, tr, want)
		}
	}
	none(t, got, "a pass that succeeded")

	failWith <- permanent
	writeSpec(t, filepath.Join(root, "run/cdi/b.json"))
	next(t, got)
	none(t, got, "a pass that failed with an error not to retry")
}

// TestBackoff: the retries' waits double from RetryFirst up to RetryMax.
func TestBackoff(t *testing.T) {
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

// TestCheckSettle: the settle time's bounds.
func TestCheckSettle(t *testing.T) {
	for d, ok := range map[time.Duration]bool{-5 * time.Second: false, 0: false, time.Millisecond: true, DefaultSettle: true, 10 * time.Second: true, 1000 * time.Hour: false} {
		if err := CheckSettle(d); (err == nil) != ok {
			t.Errorf("CheckSettle(%s) = %v", d, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLimitError: the errnos of inotify's limits name the limit, its
// sysctl with the value the kernel reports and the fix, and keep the
// errno; any other error is left as it is.
func TestLimitError(t *testing.T) {
	for _, tc := range []struct {
		op     string
		errno  unix.Errno
		sysctl string
	}{
		{"inotify_init1", unix.EMFILE, "fs.inotify.max_user_instances"},
		{"inotify_add_watch", unix.ENOSPC, "fs.inotify.max_user_watches"},
		{"inotify_init1", unix.ENFILE, "fs.file-max"},
	} {
		err := LimitError(tc.op, tc.errno)
		want := tc.sysctl + " is " + sysctl(tc.sysctl) + ":"
		if !errors.Is(err, ErrLimit) || !errors.Is(err, tc.errno) || !strings.HasPrefix(err.Error(), tc.op+": ") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "sysctl -w ") {
			t.Errorf("LimitError(%s, %v) = %v, want the errno, ErrLimit and %q", tc.op, tc.errno, err, want)
		}
	}
	if err := LimitError("inotify_add_watch", unix.EACCES); err != unix.EACCES {
		t.Errorf("EACCES: %v", err)
	}
}

// TestArmLooksAgainAfterNewWatch: a spec directory made after arm looked
// at its parent but before the parent's watch was added (mkdir -p of both
// racing the watcher) comes with no event; arm looks again after adding a
// watch and watches it. Before, the watcher stayed deaf to it.
func TestArmLooksAgainAfterNewWatch(t *testing.T) {
	// Not parallel: it sets afterScan.
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "etc"), 0o755))
	host, err := hostfs.New(root)
	must(t, err)
	fw, err := fsnotify.NewWatcher()
	must(t, err)
	defer fw.Close() //nolint:errcheck // test
	wt := &watcher{host: host, w: fw, log: slog.New(slog.DiscardHandler), hostDirs: []string{"/etc/cdi"}, ours: map[string]identity{}, watched: map[string]dirID{}}
	made := false
	afterScan = func() {
		if !made {
			made = true
			must(t, os.Mkdir(filepath.Join(root, "etc/cdi"), 0o755))
		}
	}
	defer func() { afterScan = nil }()
	must(t, wt.arm())
	spec := filepath.Join(root, "etc/cdi")
	if _, ok := wt.dirs[spec]; !ok {
		t.Fatalf("spec directories %v; want %s, made while arm ran", wt.dirs, spec)
	}
	if !slices.Contains(fw.WatchList(), spec) {
		t.Fatalf("watches %v; want %s", fw.WatchList(), spec)
	}
}
