package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/sandbox"
)

// cacheVersion changes whenever the cache's meaning does; a file of another
// version is ignored.
const cacheVersion = 1

// fileID is what identifies a program on disk: replacing, rebuilding or moving it
// changes at least one field.
type fileID struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	MTimeNS int64  `json:"mtime_ns"`
	Inode   uint64 `json:"inode"`
}

// cacheKey is everything a backend probe's verdict depends on. A cached verdict is
// used only under the very key it was found under.
type cacheKey struct {
	Tools  map[string]fileID `json:"tools"` // backend → the program it runs
	Kernel string            `json:"kernel"`
	Node   fileID            `json:"node"`
	EUID   int               `json:"euid"`
}

// cachedProbe is one backend that a real probe found working.
type cachedProbe struct {
	Version string   `json:"version,omitempty"`
	Gaps    []string `json:"gaps,omitempty"`
}

type cacheFile struct {
	V     int                    `json:"v"`
	Key   cacheKey               `json:"key"`
	Works map[string]cachedProbe `json:"works"`
}

// Cache holds, per data folder, the backends a real probe found working, so
// exec (and every other short-lived command) starts the sandbox it was asked for
// without first running one of each. Only successes are kept: a backend that failed
// is probed again next time, so fixing it needs no cache flush.
type Cache struct {
	path    string
	key     cacheKey
	works   map[string]cachedProbe // trusted: read under the current key, or probed now
	refresh bool                   // ignore what is stored, probe all (the node at start)
	dirty   bool
}

// currentKey reads the identities the probes depend on now.
func currentKey(pl Platform) cacheKey {
	k := cacheKey{Tools: map[string]fileID{}, Kernel: kernelRelease(), EUID: os.Geteuid()}
	for _, b := range pl.Backends {
		tool := ""
		if pl.Tool != nil {
			tool = pl.Tool(b.Name())
		}
		k.Tools[b.Name()] = identify(tool)
	}
	if exe, err := os.Executable(); err == nil {
		k.Node = identify(exe)
	}
	return k
}

func identify(path string) fileID {
	if path == "" {
		return fileID{}
	}
	id := fileID{Path: path}
	if fi, err := os.Stat(path); err == nil {
		id.Size, id.MTimeNS, id.Inode = fi.Size(), fi.ModTime().UnixNano(), inode(fi)
	}
	return id
}

// LoadCache reads the data folder's cache under the current key. A missing,
// garbled, foreign-owned, loosely permitted or stale file is ignored: then every
// backend counts as not yet probed.
func LoadCache(d datadir.Dir, pl Platform) *Cache {
	return loadCacheKey(d, currentKey(pl))
}

func loadCacheKey(d datadir.Dir, key cacheKey) *Cache {
	c := &Cache{path: d.ProbeCache(), key: key, works: map[string]cachedProbe{}}
	if f, err := readCacheFile(c.path); err != nil {
		if !os.IsNotExist(err) {
			// A cache: the backends are probed again and it is written anew.
			slog.Info("backend probe cache unreadable; probing again", "path", c.path, "err", err)
		}
	} else if f.V == cacheVersion && sameKey(f.Key, key) {
		for name, p := range f.Works {
			c.works[name] = p
		}
	}
	return c
}

// RefreshCache is the cache the node keeps at start: it probes every backend
// for real and stores what it found.
func RefreshCache(d datadir.Dir, pl Platform) *Cache {
	return &Cache{path: d.ProbeCache(), key: currentKey(pl), works: map[string]cachedProbe{}, refresh: true}
}

func readCacheFile(path string) (*cacheFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	// Written owner-only by this user; anything else was not written by the node.
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 || !ownedByMe(fi) {
		return nil, fmt.Errorf("%s: not a private file of this user", path)
	}
	b, err := io.ReadAll(io.LimitReader(fh, 64<<10))
	if err != nil {
		return nil, err
	}
	var f cacheFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

func sameKey(a, b cacheKey) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// cached is the stored verdict for a backend (false: probe it).
func (c *Cache) cached(name string) (cachedProbe, bool) {
	if c == nil || c.refresh {
		return cachedProbe{}, false
	}
	p, ok := c.works[name]
	return p, ok
}

// record keeps a real probe's verdict.
func (c *Cache) record(pr sandbox.Probe) {
	if c == nil {
		return
	}
	_, had := c.works[pr.Name]
	switch {
	case pr.Works:
		c.works[pr.Name] = cachedProbe{Version: pr.Version, Gaps: pr.Gaps}
		c.dirty = true
	case had:
		delete(c.works, pr.Name)
		c.dirty = true
	}
}

// save writes the cache if a probe changed it. A data folder this user cannot
// write (exec by another user) just goes without.
func (c *Cache) save() {
	if c == nil || (!c.dirty && !c.refresh) {
		return
	}
	b, err := json.Marshal(cacheFile{V: cacheVersion, Key: c.key, Works: c.works})
	if err == nil {
		err = datadir.WriteFileAtomic(c.path, append(b, '\n'), 0o600)
	}
	if err != nil {
		slog.Debug("backend probe cache not written", "path", c.path, "err", err)
	}
	c.dirty = false
}
