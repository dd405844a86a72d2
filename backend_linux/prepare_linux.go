package backendlinux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"oz0.ai/node/node/sandbox"
)

// prepare gives a per-plugin user the modes it needs below the data folder before a
// start: the search bit on every folder from the data folder down to the plugin's
// folder, its home and its proxy socket folder, and read+search on the plugin folder
// itself. bwrap resolves bind sources as that user, so a 0700 folder on the way
// fails the start. Nothing above the data folder changes, nothing is made listable
// that was not, and symlinks are left alone. (The general "modes before start" step
// is node/install's; this is the minimum a backend needs to start a Spec.)
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
			if err := addMode(d, 0o001); err != nil {
				return err
			}
			if d == data || len(d) <= len(data) {
				break
			}
		}
	}
	if strings.HasPrefix(s.PluginDir, data+"/") {
		return addMode(s.PluginDir, 0o005)
	}
	return nil
}

func addMode(p string, bits os.FileMode) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("prepare %s for the plugin user: %w", p, err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&bits == bits {
		return nil
	}
	if err := os.Chmod(p, fi.Mode().Perm()|bits); err != nil {
		return fmt.Errorf("prepare %s for the plugin user: %w", p, err)
	}
	return nil
}
