package backendlinux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"oz0.ai/node/node/sandbox"
)

// prepare gives a per-plugin user the modes it needs below the data folder before a
// start: the search bit on every folder from the data folder down to the plugin's
// folder, its home and its proxy socket folder, and read+search on the plugin folder
// itself. bwrap resolves bind sources as that user, so a 0700 folder on the way
// fails the start. Access goes through the plugin's group wherever the folder is
// the plugin's (group-owned by its gid, as the install makes a plugin's folders:
// 0750), so no other plugin's user gains anything; only folders shared by every
// plugin (the data folder, plugins/, homes/) get the search bit for others.
// Nothing above the data folder changes, nothing is made listable that was not,
// and symlinks are left alone. (The general "modes before start" step is
// node/install's; this is the minimum a backend needs to start a Spec.)
func prepare(s *sandbox.Spec) error {
	if !s.PluginUser || os.Geteuid() != 0 || s.DataDir == "" {
		return nil
	}
	data := filepath.Clean(s.DataDir)
	targets := []string{s.PluginDir, s.Home}
	if s.Proxy != nil && s.Proxy.SocketDir != "" {
		targets = append(targets, s.Proxy.SocketDir)
	}
	for _, t := range targets {
		t = filepath.Clean(t)
		if t == "" || !strings.HasPrefix(t, data+"/") {
			continue
		}
		for d := filepath.Dir(t); ; d = filepath.Dir(d) {
			if err := addMode(d, s.GID, 0o001); err != nil {
				return err
			}
			if d == data || len(d) <= len(data) {
				break
			}
		}
	}
	if strings.HasPrefix(s.PluginDir, data+"/") {
		return pluginReadable(s.PluginDir, s.GID)
	}
	return nil
}

// addMode adds bits (given for others) to folder p: as group bits when p belongs
// to the plugin's group, else for others.
func addMode(p string, gid uint32, bits os.FileMode) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("prepare %s for the plugin user: %w", p, err)
	}
	if !fi.IsDir() {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Gid == gid {
		bits <<= 3
	}
	if fi.Mode().Perm()&bits == bits {
		return nil
	}
	if err := os.Chmod(p, fi.Mode().Perm()|bits); err != nil {
		return fmt.Errorf("prepare %s for the plugin user: %w", p, err)
	}
	return nil
}

// pluginReadable lets the plugin's user read and search its own (commit) folder
// through the plugin's group, never by widening it to others: a folder not yet in
// that group is given to it.
func pluginReadable(p string, gid uint32) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("prepare %s for the plugin user: %w", p, err)
	}
	if !fi.IsDir() {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Gid != gid {
		if err := os.Lchown(p, -1, int(gid)); err != nil {
			return fmt.Errorf("prepare %s for the plugin user: give it to group %d: %w", p, gid, err)
		}
	}
	return addMode(p, gid, 0o005)
}
