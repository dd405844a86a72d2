package view

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// cloneTree replaces the empty folder dst with a clone of the tree src (APFS:
// every file shares its blocks until either is written, whatever its size), its
// entries made writable by their owner.
func cloneTree(src, dst string) error {
	if err := os.Remove(dst); err != nil {
		return err
	}
	if err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW); err != nil {
		os.Mkdir(dst, 0o700) // the caller copies instead
		return err
	}
	return filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()|0o200)
	})
}

// clone: on macOS a whole view is cloned at once (cloneTree); a file copied one
// by one is copied.
func clone(out, in *os.File) error { return errNoClone }

// errNoClone: a file is not cloned by itself here; the caller copies it.
var errNoClone = errors.New("no file clone here")
