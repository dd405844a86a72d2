//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// HandOver makes the tree at path belong to uid:gid when its top does not: the
// plugin's writable folders (its homes and views) change hands when the user it
// runs as changes — its own user, or the node's when its own cannot reach its
// folders (docs/promises.md §8) — and a sandbox cannot use a folder another
// uid owns. It reports whether anything changed.
//
// A plugin wrote the tree, so nothing in it is trusted: every step goes through
// descriptors opened without following links beneath the one before (a link
// swapped in mid-walk is never followed), links themselves change owner and
// nothing else, and a regular file with another name elsewhere is not given to a
// plugin's user (its other name would change hands too). The kernel clears
// set-user-ID and set-group-ID bits when a file changes owner. The top changes
// last, so a walk cut short is taken up again by the next start.
func HandOver(path string, uid, gid int) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("hand over %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("hand over %s: %w", path, err)
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return false, nil
	}
	if err := handOverBelow(fd, path, uid, gid, 0); err != nil {
		return false, fmt.Errorf("hand over %s: %w", path, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return false, fmt.Errorf("hand over %s: %w", path, err)
	}
	return true, nil
}

// handOverMaxDepth bounds the walk: a tree deeper than any a tool writes is
// refused rather than followed down without end.
const handOverMaxDepth = 256

var errTooDeep = errors.New("folders nested deeper than the node follows")

func handOverBelow(dir int, at string, uid, gid, depth int) error {
	if depth > handOverMaxDepth {
		return fmt.Errorf("%s: %w", at, errTooDeep)
	}
	// A fresh descriptor reads the entries: Getdents moves the offset of the one
	// it reads, and dir stays the anchor for the *at calls below.
	rd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(rd), at)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fmt.Errorf("%s/%s: %w", at, name, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("%s/%s: %w", at, name, err)
			}
			err = handOverBelow(sub, at+"/"+name, uid, gid, depth+1)
			if err == nil {
				err = unix.Fchown(sub, uid, gid)
			}
			unix.Close(sub)
			if err != nil {
				return err
			}
			continue
		}
		if int(st.Uid) == uid && int(st.Gid) == gid {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 && uid != 0 {
			continue // another name shares it: stays whose it was
		}
		if err := unix.Fchownat(dir, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s/%s: %w", at, name, err)
		}
	}
	return nil
}
