package backenddarwin

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// resolveSymlinks resolves symlinks in the longest existing part of p, as the
// kernel does before Seatbelt compares paths; the part that does not exist yet
// (a home created at first start) is kept as written.
func resolveSymlinks(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			if rest == "" {
				return r, nil
			}
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
