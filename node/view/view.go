// Package view makes a plugin's writable view of its installed commit: a copy,
// made once per commit at the first start that needs it, that the plugin's
// sandboxes see at the commit's own path, writable, while the installed commit
// stays as it was installed (docs/promises.md §12). Plugins write into their own
// folder — a Python server's .venv, a hook's logs/ — as they do under Claude Code.
package view

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Owner is who a view belongs to: the plugin's user on a root node (Chown), else
// the node's user.
type Owner struct {
	UID, GID int
	Chown    bool
}

// Ensure makes the view dst of the installed commit src when there is none yet,
// and returns whether it made it. The copy is made beside dst and renamed into
// place, so a start sees a whole view or none; its files keep their modes plus
// the owner's write bit, links are copied as links (never followed), and on a root
// node every entry belongs to the plugin's user. Views of other commits in dst's
// folder are removed (a plugin update drops the view).
func Ensure(src, dst string, o Owner) (made bool, err error) {
	if fi, err := os.Lstat(dst); err == nil {
		if !fi.IsDir() {
			return false, fmt.Errorf("plugin view %s: not a folder", dst)
		}
		return false, nil
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return false, fmt.Errorf("plugin view %s: %w", parent, err)
	}
	if fi, err := os.Lstat(parent); err != nil || !fi.IsDir() {
		return false, fmt.Errorf("plugin view %s: its folder is not a folder", parent)
	}
	if o.Chown {
		// The plugin's user passes through to its views, and nobody else.
		if err := os.Lchown(parent, o.UID, o.GID); err != nil {
			return false, fmt.Errorf("plugin view %s: %w", parent, err)
		}
	}
	tmp, err := os.MkdirTemp(parent, ".making-")
	if err != nil {
		return false, fmt.Errorf("plugin view %s: %w", dst, err)
	}
	defer os.RemoveAll(tmp)
	if o.Chown || cloneTree(src, tmp) != nil {
		if err := copyTree(src, tmp, o); err != nil {
			return false, fmt.Errorf("plugin view %s of %s: %w", dst, src, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return false, nil // another start made it meanwhile
		}
		return false, fmt.Errorf("plugin view %s: %w", dst, err)
	}
	prune(parent, filepath.Base(dst))
	return true, nil
}

// prune removes, in a plugin's views folder, the views of other commits and
// copies a start left half-made.
func prune(parent, keep string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if e.Name() != keep && !strings.HasPrefix(e.Name(), ".making-") {
			os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}

// copyTree copies src's entries into the existing folder dst.
func copyTree(src, dst string, o Owner) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm() | 0o200 // the owner (the plugin) may write its view
		switch {
		case rel == ".":
			if err := os.Chmod(dst, mode|0o700); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.IsDir():
			if err := os.Mkdir(to, mode|0o700); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(p, to, mode); err != nil {
				return err
			}
		default:
			return nil // install placed only folders, files and links
		}
		if o.Chown {
			return os.Lchown(to, o.UID, o.GID)
		}
		return nil
	})
}

// copyFile copies one regular file; the kernel copies (or clones, where the
// file system can) its data without it passing through the node.
func copyFile(from, to string, mode fs.FileMode) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := clone(out, in); err != nil {
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
