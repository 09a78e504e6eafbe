package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/renameio/v2"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// WriteFiles writes docs into the directory dir (created, with its
// parents, when missing) as one set: each Document becomes dir/File, and
// either every file is replaced or none is. It returns the paths written,
// in docs' order.
//
// The steps: dir is refused if it is a symlink, and every target if it is
// a symlink or not a regular file; every document is written and fsynced to a temporary file in dir
// (renameio, mode 0644 or the old file's mode); every existing target is
// hard-linked to a backup name, which fails on an immutable or append-only
// file (the kernel refuses links to those as it refuses renames over them);
// only then are the temporary files renamed over the targets, and dir is
// fsynced. A failure before the renames leaves dir as it was; a rename that
// fails (after the checks, only an I/O error) puts back the targets already
// replaced from their backups. Temporary and backup files are removed
// either way, and a dir WriteFiles created is removed again on failure.
// Errors name the full path (dir joined with File) and are marked
// fault.ErrCantWrite.
func WriteFiles(dir string, docs []Document) (paths []string, err error) {
	// dir itself may not be a symlink: through a link to another
	// directory, every file there of a rendered name would be replaced
	// (the links of the path above it are the user's to choose).
	if st, serr := os.Lstat(filepath.Clean(dir)); serr == nil && st.Mode()&fs.ModeSymlink != 0 {
		return nil, fault.CantWrite(fmt.Errorf("writing into %q: it is a symlink: refusing to write through it (name the directory it links to, if that is where the files belong)", dir))
	}
	if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) {
		defer func() {
			if err != nil {
				os.Remove(dir) // only if still empty: nothing was written
			}
		}()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fault.CantWrite(fmt.Errorf("creating the output directory %q: %w", dir, err))
	}
	type file struct {
		target string
		pf     *renameio.PendingFile
		backup string // "" when the target does not exist
	}
	files := make([]*file, 0, len(docs))
	defer func() {
		for _, f := range files {
			if f.pf != nil {
				f.pf.Cleanup() //nolint:errcheck // a no-op after a successful rename
			}
			if f.backup != "" {
				os.Remove(f.backup)
			}
		}
	}()
	fail := func(target, what string, err error) ([]string, error) {
		return nil, fault.CantWrite(fmt.Errorf("writing %q: %s%w", target, what, err))
	}
	// Refuse what cannot be replaced as a regular file, before any write.
	modes := make([]fs.FileMode, len(docs))
	for i, d := range docs {
		target := filepath.Join(dir, d.File)
		modes[i] = 0o644
		st, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fail(target, "", err)
		case st.Mode()&fs.ModeSymlink != 0:
			return fail(target, "", errors.New("it is a symlink: refusing to replace it (remove it, or write to another directory)"))
		case !st.Mode().IsRegular():
			return fail(target, "", fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(st.Mode())))
		default:
			modes[i] = st.Mode().Perm()
		}
	}
	// Stage every document.
	for i, d := range docs {
		f := &file{target: filepath.Join(dir, d.File)}
		files = append(files, f)
		pf, err := renameio.NewPendingFile(f.target, renameio.WithTempDir(dir), renameio.WithStaticPermissions(modes[i]))
		if err != nil {
			return fail(f.target, "", err)
		}
		f.pf = pf
		if _, err := pf.Write(d.Data); err != nil {
			return fail(f.target, "", err)
		}
		if err := pf.Sync(); err != nil {
			return fail(f.target, "", err)
		}
	}
	// Back up every existing target: proves it can be replaced.
	for _, f := range files {
		if _, err := os.Lstat(f.target); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.target)+".old*")
		if err != nil {
			return fail(f.target, "", err)
		}
		tmp.Close()
		os.Remove(tmp.Name())
		if err := os.Link(f.target, tmp.Name()); err != nil {
			why := "it cannot be replaced: "
			if errors.Is(err, syscall.EPERM) {
				why = "it cannot be replaced (immutable or append-only? lsattr shows the flags): "
			}
			return fail(f.target, why, errors.Unwrap(err)) // the LinkError's cause: the backup name means nothing to a user
		}
		f.backup = tmp.Name()
	}
	// Replace them all; put back what was replaced if one fails.
	for i, f := range files {
		if err := f.pf.CloseAtomicallyReplace(); err != nil {
			for _, g := range files[:i] {
				if g.backup != "" {
					if os.Rename(g.backup, g.target) == nil {
						g.backup = ""
					}
				} else {
					os.Remove(g.target)
				}
			}
			return fail(f.target, "", err)
		}
		f.pf = nil
		paths = append(paths, f.target)
	}
	if err := syncDir(dir); err != nil {
		return nil, fault.CantWrite(fmt.Errorf("writing into %q: syncing the directory: %w", dir, err))
	}
	return paths, nil
}

// syncDir fsyncs the directory dir, so that the renames in it survive a
// crash (renameio syncs the files, not the directory).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
