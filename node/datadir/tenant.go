package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"oz0.ai/node/node/netrule"
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
