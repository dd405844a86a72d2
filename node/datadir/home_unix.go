//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrHomeLink marks a plugin home that is a symlink or not a folder. A plugin
// controls what is in its home and, where its tools run as the node's user
// (macOS, unsandboxed runs), the home's own entry: a link there would make the
// node create, chown and chmod — and a sandbox grant — whatever it points to.
var ErrHomeLink = errors.New("is a symlink or not a folder; the node never follows it")

// EnsureHome makes the home of plugin name a real folder directly under the
// canonical homes/ folder, owned by uid:gid when chown is set, mode 0700, and
// returns its canonical path. Every step goes through descriptors opened without
// following links: homes/ by its canonical path, the home by name beneath it. A
// home that is a link is refused, and nothing at its target changes. mode is the
// mode homes/ gets when it has to be created.
func (d Dir) EnsureHome(name string, mode os.FileMode, uid, gid int, chown bool) (string, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return "", fmt.Errorf("plugin home %q: not a single folder name", name)
	}
	homes := d.Homes()
	if err := os.MkdirAll(homes, mode); err != nil {
		return "", fmt.Errorf("create %s: %w", homes, err)
	}
	if fi, err := os.Lstat(homes); err != nil {
		return "", fmt.Errorf("plugin homes %s: %w", homes, err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("plugin homes %s: %w", homes, ErrHomeLink)
	}
	// The data folder may sit below an operator's link; homes/ itself is the node's.
	canon, err := filepath.EvalSymlinks(homes)
	if err != nil {
		return "", fmt.Errorf("plugin homes %s: %w", homes, err)
	}
	dfd, err := unix.Open(canon, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open plugin homes %s: %w", canon, err)
	}
	defer unix.Close(dfd)
	home := filepath.Join(canon, name)
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("create plugin home %s: %w", home, err)
	}
	hfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return "", fmt.Errorf("plugin home %s %w (remove it; the node makes a fresh one)", home, ErrHomeLink)
	}
	if err != nil {
		return "", fmt.Errorf("open plugin home %s: %w", home, err)
	}
	f := os.NewFile(uintptr(hfd), home)
	defer f.Close()
	if chown {
		if err := f.Chown(uid, gid); err != nil {
			return "", fmt.Errorf("chown plugin home %s: %w", home, err)
		}
	}
	if err := f.Chmod(0o700); err != nil {
		return "", fmt.Errorf("chmod plugin home %s: %w", home, err)
	}
	return home, nil
}
