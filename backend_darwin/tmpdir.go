package backenddarwin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"oz0.ai/node/node/sandbox"
)

// ensureTMPDIR creates the tool's TMPDIR, which lies in its home (the only
// writable place). The plugin owns what is in its home: a link it left where
// TMPDIR goes is never followed, and the start is refused.
func ensureTMPDIR(s *sandbox.Spec) error {
	for _, kv := range s.Env {
		v, ok := strings.CutPrefix(kv, "TMPDIR=")
		if !ok || path.Dir(v) != s.Home {
			continue
		}
		if err := os.Mkdir(v, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("seatbelt: plugin %s: create TMPDIR %s: %w", s.Plugin, v, err)
		}
		if fi, err := os.Lstat(v); err != nil || !fi.IsDir() {
			return fmt.Errorf("seatbelt: plugin %s: TMPDIR %s is a link or not a folder; the node never follows it (remove it)", s.Plugin, v)
		}
	}
	return nil
}
