// Package specwatch watches a container runtime's CDI spec directories
// and runs a pass each time a spec file in them appears, is replaced,
// rewritten or removed: the re-patch after boot, when the NVIDIA device
// plugin or the DRA driver (re)writes its spec (docs/runtime-view.md,
// "After boot").
//
// Its trigger is the one a systemd path unit with PathChanged= on each
// directory has (systemd.path(5); src/core/path.c watches a directory for
// IN_CREATE, IN_CLOSE_WRITE, IN_MOVED_TO/FROM, IN_DELETE and IN_ATTRIB on
// its entries), which the NixOS module installs, with two differences a
// long-running watcher can afford: an event that arrives while a pass runs
// is never lost (it starts the next pass once this one ends, where systemd
// merges it into the running start job), and the event of the pass's own
// write is recognised by the file's identity and starts no pass.
//
// Only names the CDI library loads count (pkg/cdi spec-dirs.go: *.json
// and *.yaml); a writer's temporary file (spec.*.tmp, .name123) does not.
// Events within Settle of each other make one pass. A directory that does
// not exist yet is watched through its nearest existing parent and added
// when it appears, as a path unit waits for a missing path.
//
// The inotify watches come from github.com/fsnotify/fsnotify.
package specwatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultSettle is how long a pass waits after the last event before it
// runs: long enough to take a writer's create-then-rename or a burst of
// writes as one event, short against the time a pod takes to start.
const DefaultSettle = 20 * time.Millisecond

// Pass is one run over the directories. It returns the spec files it
// wrote itself, so their events start no pass, and an error that Run logs
// (the next event runs a new pass).
type Pass func(ctx context.Context, trigger Trigger) (wrote []Written, err error)

// Written is a spec file a pass wrote: its host path and its Stat as it
// was renamed into place (hostfs.WriteOptions.Written). Taken before the
// rename, not after it, so that a writer that replaces the file right
// after nodeprep's write is never taken for nodeprep.
type Written struct {
	Path string
	Info fs.FileInfo
}

// Trigger says why a pass runs.
type Trigger struct {
	// Initial is true for the pass Run makes when it starts (specs
	// written before it watched).
	Initial bool
	// Files are the host paths of the spec files whose events started
	// the pass, in the order they came (each once).
	Files []string
	// First is when the first of those events arrived.
	First time.Time
}

// Options tune Run.
type Options struct {
	// Settle is the quiet time after the last event before a pass runs
	// (DefaultSettle when 0).
	Settle time.Duration
	// Log gets one debug line per event and per skipped event (nil:
	// discarded).
	Log *slog.Logger
	// Ready, when set, is called once the watches are in place, before
	// the initial pass.
	Ready func()
}

// identity tells one version of a file from the next (inode, size,
// modification time).
type identity struct {
	ino, size, mtime int64
}

func identify(p string) (identity, bool) {
	st, err := os.Stat(p)
	if err != nil {
		return identity{}, false
	}
	return identityOf(st), true
}

func identityOf(st fs.FileInfo) identity {
	id := identity{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(sys.Ino) //nolint:gosec // inode numbers fit
	}
	return id
}

// SpecFile reports whether the CDI library loads a file of this name from
// a spec directory (pkg/cdi spec-dirs.go: the extension is .json or
// .yaml); hidden temporary files of atomic writers do not end so.
func SpecFile(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".json" || ext == ".yaml"
}

// watcher is Run's state.
type watcher struct {
	host  *hostfs.Root
	w     *fsnotify.Watcher
	log   *slog.Logger
	dirs  map[string]string // machine path of each watched spec directory → host path
	wait  map[string]string // machine path of a missing directory → its host path, watched through a parent
	ours  map[string]identity
	watch map[string]bool // machine paths with an inotify watch
}

// Run watches dirs (host paths under host, as the runtime reads them) and
// calls pass once at the start and then after every settled burst of
// events, until ctx is done; it then returns nil. Errors: the watches
// cannot be set up (inotify unavailable or out of watches), or no
// directory nor any parent of one can be watched.
func Run(ctx context.Context, host *hostfs.Root, dirs []string, pass Pass, opts Options) error {
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching CDI spec directories: %w", err)
	}
	defer fw.Close()
	wt := &watcher{host: host, w: fw, log: opts.Log, dirs: map[string]string{}, wait: map[string]string{}, ours: map[string]identity{}, watch: map[string]bool{}}
	for _, d := range dirs {
		if err := wt.add(d); err != nil {
			return err
		}
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	wt.run(ctx, pass, Trigger{Initial: true, First: time.Now()})

	var pending Trigger
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// IN_Q_OVERFLOW: events were lost, so look at everything.
			opts.Log.Warn("watching CDI spec directories", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				pending.Initial = true
				if pending.First.IsZero() {
					pending.First = time.Now()
				}
				timer.Reset(opts.Settle)
			}
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			hp, relevant := wt.event(ev)
			if !relevant {
				continue
			}
			if pending.First.IsZero() {
				pending.First = time.Now()
			}
			if hp != "" && !contains(pending.Files, hp) {
				pending.Files = append(pending.Files, hp)
			}
			timer.Reset(opts.Settle)
		case <-timer.C:
			t := pending
			pending = Trigger{}
			if !t.Initial && wt.allOurs(t.Files) {
				opts.Log.Debug("skipped: the events are nodeprep's own writes", "files", t.Files)
				continue
			}
			wt.run(ctx, pass, t)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// run runs one pass and records the identity of what it wrote.
func (wt *watcher) run(ctx context.Context, pass Pass, t Trigger) {
	if ctx.Err() != nil {
		return
	}
	wrote, err := pass(ctx, t)
	if err != nil {
		wt.log.Warn("re-patch failed; the next change of a spec runs it again", "err", err)
	}
	for _, w := range wrote {
		if p, perr := wt.host.Path(w.Path); perr == nil && w.Info != nil {
			wt.ours[p] = identityOf(w.Info)
		}
	}
}

// allOurs reports whether every file of an event batch is, right now,
// exactly what a pass wrote (its own rename's event).
func (wt *watcher) allOurs(files []string) bool {
	if len(files) == 0 {
		return false
	}
	for _, hp := range files {
		p, err := wt.host.Path(hp)
		if err != nil {
			return false
		}
		id, ok := identify(p)
		if !ok || wt.ours[p] != id {
			return false
		}
	}
	return true
}

// add watches a spec directory, or, when it does not exist yet, its
// nearest existing parent.
func (wt *watcher) add(hostDir string) error {
	p, err := wt.host.Path(hostDir)
	if err != nil {
		return fmt.Errorf("watching CDI spec directory %q: %w", hostDir, err)
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		wt.dirs[p] = hostDir
		return wt.addWatch(p, hostDir)
	}
	wt.wait[p] = hostDir
	for parent := filepath.Dir(p); ; parent = filepath.Dir(parent) {
		if st, err := os.Stat(parent); err == nil && st.IsDir() {
			return wt.addWatch(parent, hostDir)
		}
		if parent == filepath.Dir(parent) || !strings.HasPrefix(parent, wt.host.Dir()) {
			return fmt.Errorf("watching CDI spec directory %q: neither it nor a parent exists", hostDir)
		}
	}
}

func (wt *watcher) addWatch(p, hostDir string) error {
	if wt.watch[p] {
		return nil
	}
	if err := wt.w.Add(p); err != nil {
		return fmt.Errorf("watching CDI spec directory %q (%s): %w", hostDir, p, err)
	}
	wt.watch[p] = true
	return nil
}

// event classifies one inotify event: the host path of the spec file it
// is about ("" for a spec directory that appeared), and whether it starts
// a pass.
func (wt *watcher) event(ev fsnotify.Event) (string, bool) {
	wt.log.Debug("CDI spec directory event", "name", ev.Name, "op", ev.Op.String())
	dir := filepath.Dir(ev.Name)
	if hd, ok := wt.dirs[dir]; ok {
		if !SpecFile(ev.Name) || ev.Op&^fsnotify.Chmod == 0 {
			return "", false
		}
		return path.Join(hd, filepath.Base(ev.Name)), true
	}
	// A missing spec directory, or a parent on the way to it, appeared.
	if ev.Op&fsnotify.Create == 0 {
		return "", false
	}
	appeared := false
	for p, hd := range wt.wait {
		if p != ev.Name && !strings.HasPrefix(p, ev.Name+string(filepath.Separator)) {
			continue
		}
		delete(wt.wait, p)
		if err := wt.add(hd); err != nil {
			wt.log.Warn("watching a CDI spec directory that appeared", "dir", hd, "err", err)
			continue
		}
		if _, ok := wt.dirs[p]; ok {
			appeared = true
		}
	}
	return "", appeared
}
