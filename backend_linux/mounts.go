package backendlinux

import (
	"fmt"
	"path"
	"strings"

	"oz0.ai/node/node/sandbox"
)

// writableDests are the sandbox paths the plugin can write: no mount point may be
// made below them (a plugin could plant a symlink there first).
func writableDests(s *sandbox.Spec) []string {
	var out []string
	for _, m := range s.Mounts {
		if m.Writable {
			out = append(out, path.Clean(m.Dest))
		}
	}
	return out
}

// mountCheck applies the rules every bind of every backend follows: absolute
// paths, no mount point under a plugin-writable path, an existing source, and no
// symlink followed — a symlinked source is an error, except an optional system
// folder (e.g. /bin → usr/bin), which the caller recreates as the same symlink
// (info.Symlink is then set). skip is true for a missing optional source.
func mountCheck(s *sandbox.Spec, m sandbox.Mount, dest string, writable []string, inspect Inspect) (info PathInfo, skip bool, err error) {
	if !path.IsAbs(dest) || !path.IsAbs(m.Source) {
		return info, false, fmt.Errorf("plugin %s: mount %s → %s: paths must be absolute", s.Plugin, m.Source, dest)
	}
	for _, w := range writable {
		if strings.HasPrefix(dest, w+"/") {
			return info, false, fmt.Errorf("plugin %s: mount %s at %s: %w %s", s.Plugin, m.Source, dest, errMountUnderWritable, w)
		}
	}
	info = inspect(m.Source)
	switch {
	case info.Missing && m.Optional:
		return info, true, nil
	case info.Missing:
		return info, false, fmt.Errorf("plugin %s: mount source %s does not exist", s.Plugin, m.Source)
	case info.Symlink != "" && !m.Optional:
		return info, false, fmt.Errorf("plugin %s: mount source %s is a symlink; bind sources are never followed", s.Plugin, m.Source)
	}
	return info, false, nil
}
