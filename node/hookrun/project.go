package hookrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Project resolves the session's cwd into the folder a granted plugin's hooks may
// read: the plugin must be granted (--plugin-hooks-project), the cwd must exist as
// a folder, and its real path (links resolved, so the bind follows none) must be
// one policy.ProjectRefusal lets through. "" with a nil error means not granted.
func Project(granted []string, plugin, cwd, dataDir, home string) (string, error) {
	if !slices.Contains(granted, plugin) {
		return "", nil
	}
	if cwd == "" || !filepath.IsAbs(cwd) {
		return "", errors.New("the payload names no absolute cwd")
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(cwd))
	if err != nil {
		return "", fmt.Errorf("project %s: %w", cwd, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("project %s: %w", cwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("project %s: not a folder", cwd)
	}
	if r, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = r
	}
	if r, err := filepath.EvalSymlinks(home); err == nil {
		home = r
	}
	if why := policy.ProjectRefusal(real, dataDir, home); why != "" {
		return "", fmt.Errorf("project %s not shown to plugin %s's hooks: %s", cwd, plugin, why)
	}
	return real, nil
}

// WithProject binds the project read-only into a hook's sandbox at its own path
// and starts the hook there with CLAUDE_PROJECT_DIR naming it, as Claude Code
// starts hooks in the project.
func WithProject(spec *sandbox.Spec, project string) {
	if project == "" {
		return
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: project, Dest: project})
	spec.Dir = project
	spec.Env = append(spec.Env, "CLAUDE_PROJECT_DIR="+project)
}
