package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"oz0.ai/node/node/netrule"
	"oz0.ai/node/node/toolrule"
)

// ReadTenantList reads and parses the tenant's egress list at path as the proxy
// does: a missing file allows nothing and is no error; a file that cannot be read
// or parsed allows nothing and says why. raw is what was read.
func ReadTenantList(path string) (tl *netrule.TenantList, raw []byte) {
	tl = &netrule.TenantList{Path: path}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		tl.Missing = true
		return tl, nil
	}
	if err != nil {
		tl.Err = fmt.Errorf("read %s: %w", path, err)
		return tl, nil
	}
	defer f.Close()
	raw, err = io.ReadAll(io.LimitReader(f, netrule.MaxTenantList+2))
	if err != nil {
		tl.Err = fmt.Errorf("read %s: %w", path, err)
		return tl, nil
	}
	tl.Patterns, tl.Lines, tl.Err = netrule.ParseTenantList(bytes.NewReader(raw), path)
	return tl, raw
}

// ReadToolRules reads and parses the tenant's tool rules at path
// (Dir.ToolRules): a missing file allows every tool and is no error; a file that
// cannot be read or parsed refuses every tool and says why. raw is what was read.
func ReadToolRules(path string) (rs *toolrule.Rules, raw []byte) {
	rs = &toolrule.Rules{Path: path}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		rs.Missing = true
		return rs, nil
	}
	if err != nil {
		rs.Err = fmt.Errorf("read %s: %w", path, err)
		return rs, nil
	}
	defer f.Close()
	raw, err = io.ReadAll(io.LimitReader(f, toolrule.MaxFile+2))
	if err != nil {
		rs.Err = fmt.Errorf("read %s: %w", path, err)
		return rs, nil
	}
	rs.Rules, rs.Err = toolrule.Parse(bytes.NewReader(raw), path)
	return rs, raw
}

// AppendTenantLine adds a line, after a comment line, to a tenant file (the egress
// list, the tool rules) atomically: readers see the file without it or with both
// lines, never half. The file keeps its mode (mode is for a new one); a file that
// does not end with a newline gets one first.
func AppendTenantLine(path, comment, line string, mode os.FileMode) error {
	// A file that is a link (the operator keeps it elsewhere) is written where
	// it points, and stays a link.
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("add to %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if strings.ContainsAny(comment+line, "\n\r") {
		return fmt.Errorf("add to %s: a line break in %q", path, comment+line)
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "# %s\n%s\n", comment, line)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("add to %s: %w", path, err)
	}
	return WriteFileAtomic(path, b.Bytes(), mode)
}
