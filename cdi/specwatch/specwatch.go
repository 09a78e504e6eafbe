// Package specwatch watches a container runtime's CDI spec directories
// and runs a pass each time a spec file in them appears, is replaced,
// rewritten or removed: the re-patch after boot, when the NVIDIA device
// plugin or the DRA driver (re)writes its spec (docs/runtime-view.md,
// "After boot").
//
// Its trigger is the one a systemd path unit with PathChanged= on each
// directory has (systemd.path(5); src/core/path.c watches a directory for
// IN_CREATE, IN_CLOSE_WRITE, IN_MOVED_TO/FROM, IN_DELETE and IN_ATTRIB on
// its entries), which the NixOS module installs, with three differences a
// long-running watcher can afford: an event that arrives while a pass runs
// is never lost (it starts the next pass once this one ends, where systemd
// merges it into the running start job), the event of the pass's own
// write is recognised by the file's identity and starts no pass, and a
// pass that fails (the lock held past its wait, a write that failed) is
// run again after a backoff instead of waiting for the next event.
//
// Only names the CDI library loads count (pkg/cdi spec-dirs.go: *.json
// and *.yaml); a writer's temporary file (spec.*.tmp, .name123) does not.
// Events within Settle of each other make one pass.
//
// A directory is watched by what its path names now, not by the inode it
// named at the start: the parent of each directory, and the parent of
// each symlink on the way to it, are watched too, and when an entry on the
// way is created, removed, renamed or re-linked (or the directory's own
// watch ends: IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, each followed by
// the IN_IGNORED fsnotify keeps to itself) the watches are
// set up again from the paths and a pass runs over everything, so a
// directory removed and recreated, moved away and replaced, or replaced by
// a link to another directory is watched as before. A directory that does
// not exist yet is watched through its nearest existing parent, as a path
// unit waits for a missing path. Symlinks in the ancestors of a
// directory's parent are resolved when the watches are set up and are not
// watched themselves.
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
	"slices"
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

// The bounds of Options.Settle: at least a millisecond, at most 10 s (a
// pod that starts after a spec is written gets the unpatched spec until
// the pass runs; a longer settle only widens that window).
const (
	MinSettle = time.Millisecond
	MaxSettle = 10 * time.Second
)

// The retry of a failed pass: the first retry RetryFirst after the
// failure, each next one twice as late, at most RetryMax apart, and at
// most RetryAttempts retries in a row; after that the watcher gives up
// until the next event. With a pass that waits 30 s for the lock (cdi
// watch's --wait), that spans about 5 minutes, the interval of the health
// timer that would otherwise be the next to judge the specs.
const (
	RetryFirst    = 100 * time.Millisecond
	RetryMax      = 5 * time.Second
	RetryAttempts = 10
)

// Pass is one run over the directories. It returns the spec files it
// wrote itself, so their events start no pass, and an error that Run logs
// and, when Options.Retryable allows, retries.
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
	// Rearmed is true when a watched directory, or a parent or link on
	// the way to it, changed (removed, recreated, re-linked) or events
	// were lost: the watches were set up again and every spec counts as
	// new.
	Rearmed bool
	// Files are the host paths of the spec files whose events started
	// the pass, in the order they came (each once).
	Files []string
	// First is when the first of those events arrived.
	First time.Time
	// Retry counts the passes that failed before this one in a row (0
	// for a first try): this pass runs them again.
	Retry int
}

// merge adds u's reasons to t's.
func (t Trigger) merge(u Trigger) Trigger {
	t.Initial = t.Initial || u.Initial
	t.Rearmed = t.Rearmed || u.Rearmed
	for _, f := range u.Files {
		if !slices.Contains(t.Files, f) {
			t.Files = append(t.Files, f)
		}
	}
	if t.First.IsZero() || !u.First.IsZero() && u.First.Before(t.First) {
		t.First = u.First
	}
	t.Retry = max(t.Retry, u.Retry)
	return t
}

// Options tune Run.
type Options struct {
	// Settle is the quiet time after the last event before a pass runs
	// (DefaultSettle when 0; CheckSettle says what the caller may pass).
	Settle time.Duration
	// Log gets one debug line per event and per skipped event, and a
	// warning per failed pass and per re-arming that failed (nil:
	// discarded).
	Log *slog.Logger
	// Ready, when set, is called once the watches are in place, before
	// the initial pass.
	Ready func()
	// Retryable says whether a pass that failed with err is run again
	// (nil: every error is). A pass that is not retried waits for the
	// next event.
	Retryable func(err error) bool
}

// CheckSettle checks a settle time against MinSettle and MaxSettle; the
// error names the bounds.
func CheckSettle(d time.Duration) error {
	if d < MinSettle || d > MaxSettle {
		return fmt.Errorf("%s is out of range: want %s to %s (default %s)", d, MinSettle, MaxSettle, DefaultSettle)
	}
	return nil
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

// dirID tells one directory from another at the same path (device, inode).
type dirID struct{ dev, ino uint64 }

func dirIdentity(p string) (dirID, bool) {
	st, err := os.Stat(p)
	if err != nil || !st.IsDir() {
		return dirID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return dirID{}, false
	}
	return dirID{uint64(sys.Dev), sys.Ino}, true //nolint:gosec,unconvert // Dev is uint64 on linux/amd64, not everywhere
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
	host     *hostfs.Root
	w        *fsnotify.Watcher
	log      *slog.Logger
	hostDirs []string                   // the spec directories asked for (host paths)
	dirs     map[string]string          // machine path of each existing spec directory → host path
	anchors  map[string]map[string]bool // machine path of a directory → names in it on the way to a spec directory
	watched  map[string]dirID           // machine paths with an inotify watch → the directory watched
	ours     map[string]identity
}

// Run watches dirs (host paths under host, as the runtime reads them) and
// calls pass once at the start and then after every settled burst of
// events, until ctx is done; it then returns nil. A pass that fails is run
// again (Options.Retryable, RetryFirst...). Errors: the watches cannot be
// set up, inotify's limits included (wrapping ErrLimit, with the limit,
// its value and the fix: LimitError), or no directory nor any parent of
// one can be watched.
func Run(ctx context.Context, host *hostfs.Root, dirs []string, pass Pass, opts Options) error {
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Retryable == nil {
		opts.Retryable = func(error) bool { return true }
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching CDI spec directories: %w", LimitError("inotify_init1", err))
	}
	defer fw.Close()
	wt := &watcher{host: host, w: fw, log: opts.Log, hostDirs: dirs, ours: map[string]identity{}, watched: map[string]dirID{}}
	if err := wt.arm(); err != nil {
		return err
	}
	if opts.Ready != nil {
		opts.Ready()
	}

	var (
		pending     Trigger  // the events of the pass to come
		retry       *Trigger // a pass that failed, to run again
		rearmFailed int      // re-armings that failed in a row
	)
	settle, retryTimer, rearmTimer := stoppedTimer(), stoppedTimer(), stoppedTimer()
	// runPass runs t and, when it fails, schedules it again.
	runPass := func(t Trigger) {
		retry = nil
		retryTimer.Stop()
		err := wt.run(ctx, pass, t)
		switch {
		case err == nil || ctx.Err() != nil:
		case !opts.Retryable(err):
			opts.Log.Warn("re-patch failed; the next change of a spec runs it again", "err", err)
		case t.Retry >= RetryAttempts:
			opts.Log.Error("re-patch failed; gave up retrying, the next change of a spec runs it again", "retries", t.Retry, "err", err)
		default:
			t.Retry++
			d := backoff(t.Retry)
			opts.Log.Warn("re-patch failed; running it again", "in", d.String(), "retry", t.Retry, "of", RetryAttempts, "err", err)
			retry = &t
			retryTimer.Reset(d)
		}
	}
	// rearm sets the watches up again after a directory changed, and a
	// pass over everything after the settle time.
	rearm := func() {
		pending = pending.merge(Trigger{Rearmed: true, First: time.Now()})
		settle.Reset(opts.Settle)
		if err := wt.arm(); err != nil {
			rearmFailed++
			d := backoff(rearmFailed)
			opts.Log.Warn("watching CDI spec directories again failed; trying again", "in", d.String(), "err", err)
			rearmTimer.Reset(d)
			return
		}
		rearmFailed = 0
		rearmTimer.Stop()
	}

	runPass(Trigger{Initial: true, First: time.Now()})
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// IN_Q_OVERFLOW: events were lost, so set everything up
			// again and look at everything.
			opts.Log.Warn("watching CDI spec directories", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				rearm()
			}
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			hp, relevant, structural := wt.event(ev)
			if structural {
				rearm()
				continue
			}
			if !relevant {
				continue
			}
			if pending.First.IsZero() {
				pending.First = time.Now()
			}
			if hp != "" && !slices.Contains(pending.Files, hp) {
				pending.Files = append(pending.Files, hp)
			}
			settle.Reset(opts.Settle)
		case <-rearmTimer.C:
			rearm()
		case <-settle.C:
			t := pending
			pending = Trigger{}
			if retry != nil { // this pass runs the failed one again too
				t = t.merge(*retry)
			} else if !t.Initial && !t.Rearmed && wt.allOurs(t.Files) {
				opts.Log.Debug("skipped: the events are nodeprep's own writes", "files", t.Files)
				continue
			}
			runPass(t)
		case <-retryTimer.C:
			if retry == nil {
				continue
			}
			t := retry.merge(pending)
			pending = Trigger{}
			settle.Stop()
			runPass(t)
		}
	}
}

// backoff is the wait before retry n (1, 2, ...): RetryFirst doubled
// n-1 times, at most RetryMax.
func backoff(n int) time.Duration {
	d := RetryFirst
	for i := 1; i < n && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// run runs one pass and records the identity of what it wrote; it
// returns the pass's error, after logging it.
func (wt *watcher) run(ctx context.Context, pass Pass, t Trigger) error {
	if ctx.Err() != nil {
		return nil
	}
	wrote, err := pass(ctx, t)
	for _, w := range wrote {
		if p, perr := wt.host.Path(w.Path); perr == nil && w.Info != nil {
			wt.ours[p] = identityOf(w.Info)
		}
	}
	return err
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

// maxLinks bounds the symlinks followed from a spec directory's path to
// the directory, as the kernel's path walk does (MAXSYMLINKS, 40).
const maxLinks = 40

// arm sets the watches up from the paths as they are now: each existing
// spec directory, the directory that holds it and the directory holding
// each symlink on the way to it (so that a removal, a new directory or a
// re-pointed link there is seen), or, for a directory that does not exist,
// its nearest existing parent. Watches of directories no longer on the way
// are removed; a watch whose path now names another directory is set up
// again. Errors: a path that cannot be resolved under the root, a
// spec directory with no existing parent, inotify's limits (ErrLimit).
//
// A directory is looked at before the watch of the directory holding it
// is added, so what is created between the two (mkdir -p making a parent
// and the spec directory in one go) comes with no event: whenever a look
// added a watch, arm looks again, until a look adds none (at most once
// per step on the way, maxLinks+1 looks).
func (wt *watcher) arm() error {
	for range maxLinks + 1 {
		added, err := wt.armOnce()
		if err != nil || !added {
			return err
		}
	}
	return nil
}

// afterScan, when set (tests), runs in armOnce between looking at the
// paths and adding the watches.
var afterScan func()

// armOnce is one look of arm; added says whether it added a watch.
func (wt *watcher) armOnce() (added bool, err error) {
	dirs := map[string]string{}
	anchors := map[string]map[string]bool{}
	anchor := func(dir, name string) {
		if anchors[dir] == nil {
			anchors[dir] = map[string]bool{}
		}
		anchors[dir][name] = true
	}
	for _, hd := range wt.hostDirs {
		cur := hd
		for range maxLinks {
			parent, err := wt.host.Path(path.Dir(cur))
			if err != nil {
				return false, fmt.Errorf("watching CDI spec directory %q: %w", hd, err)
			}
			name := path.Base(cur)
			if st, err := os.Stat(parent); err != nil || !st.IsDir() {
				dir, next, err := wt.existingParent(parent)
				if err != nil {
					return false, fmt.Errorf("watching CDI spec directory %q: %w", hd, err)
				}
				anchor(dir, next)
				break
			}
			anchor(parent, name)
			p := filepath.Join(parent, name)
			lst, err := os.Lstat(p)
			if err != nil {
				break // not there yet: its creation is an event in parent
			}
			if lst.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(p)
				if err != nil {
					break
				}
				if !path.IsAbs(target) {
					hostParent, err := wt.host.Resolve(path.Dir(cur))
					if err != nil {
						return false, fmt.Errorf("watching CDI spec directory %q: %w", hd, err)
					}
					target = path.Join(hostParent, target)
				}
				cur = path.Clean(target)
				continue
			}
			if lst.IsDir() {
				dirs[p] = hd
			}
			break
		}
	}
	if afterScan != nil {
		afterScan()
	}
	want := map[string]bool{}
	for p := range dirs {
		want[p] = true
	}
	for p := range anchors {
		want[p] = true
	}
	live := map[string]bool{}
	for _, p := range wt.w.WatchList() {
		live[p] = true
	}
	for p := range wt.watched {
		if !want[p] {
			delete(wt.watched, p)
			if live[p] {
				_ = wt.w.Remove(p) // gone with its directory already, or not
			}
		}
	}
	var errs []error
	for p := range want {
		id, ok := dirIdentity(p)
		if !ok {
			continue // removed meanwhile: the event of that comes next
		}
		if old, ok := wt.watched[p]; ok && old == id && live[p] {
			continue
		}
		if live[p] { // the path names another directory now
			_ = wt.w.Remove(p)
		}
		delete(wt.watched, p)
		if err := wt.w.Add(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			err = fmt.Errorf("watching CDI spec directory %s: %w", p, LimitError("inotify_add_watch", err))
			if errors.Is(err, ErrLimit) {
				wt.dirs, wt.anchors = dirs, anchors
				return added, err // the next would say the same
			}
			errs = append(errs, err)
			continue
		}
		wt.watched[p] = id
		added = true
	}
	wt.dirs, wt.anchors = dirs, anchors
	return added, errors.Join(errs...)
}

// existingParent is the nearest existing directory above p (a machine
// path under the root) and the name in it on the way to p.
func (wt *watcher) existingParent(p string) (dir, name string, err error) {
	for child, parent := p, filepath.Dir(p); ; child, parent = parent, filepath.Dir(parent) {
		if !strings.HasPrefix(parent, wt.host.Dir()) || child == parent {
			return "", "", errors.New("neither it nor a parent exists")
		}
		if st, err := os.Stat(parent); err == nil && st.IsDir() {
			return parent, filepath.Base(child), nil
		}
	}
}

// event classifies one inotify event: the host path of the spec file it
// is about, whether it starts a pass, and whether it changed the way to a
// spec directory (the watches must be set up again first).
func (wt *watcher) event(ev fsnotify.Event) (hostPath string, relevant, structural bool) {
	wt.log.Debug("CDI spec directory event", "name", ev.Name, "op", ev.Op.String())
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	moved := ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0
	if moved && wt.anchors[dir][name] {
		return "", true, true // an entry on the way was created, removed, renamed or re-linked
	}
	if _, ok := wt.watched[ev.Name]; ok && (ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 || ev.Op == 0) {
		// IN_DELETE_SELF, IN_MOVE_SELF or IN_UNMOUNT (no Op): that
		// watch is gone (the IN_IGNORED after it, which fsnotify does
		// not pass on, says the same).
		return "", true, true
	}
	if hd, ok := wt.dirs[dir]; ok && SpecFile(name) && ev.Op&^fsnotify.Chmod != 0 {
		return path.Join(hd, name), true, false
	}
	return "", false, false
}
