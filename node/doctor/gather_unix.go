//go:build unix

package doctor

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"oz0.ai/node/node/datadir"
)

// GatherDataFolder reads the modes and owners of the data folder and of every
// folder above it.
func GatherDataFolder(root string) DataFolder {
	d := DataFolder{Root: root}
	var chain []string
	for p := filepath.Clean(root); ; p = filepath.Dir(p) {
		chain = append([]string{p}, chain...)
		if filepath.Dir(p) == p {
			break
		}
	}
	for _, p := range chain {
		d.Chain = append(d.Chain, pathInfo(p))
	}
	d.Traversable, d.Blocker = datadir.TraversableByOthers(root)
	return d
}

func pathInfo(p string) PathInfo {
	pi := PathInfo{Path: p}
	fi, err := os.Lstat(p)
	if err != nil {
		return pi
	}
	pi.Exists, pi.Dir = true, fi.IsDir()
	pi.Mode = uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		pi.Mode |= 0o1000
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		pi.UID, pi.GID = int(st.Uid), int(st.Gid)
	}
	return pi
}

// GatherTenantList reads and parses the tenant list as the proxy does.
func GatherTenantList(path string) TenantList {
	t := TenantList{Path: path}
	tl, _ := datadir.ReadTenantList(path)
	if tl.Missing {
		return t
	}
	t.Exists = true
	if fi, err := os.Stat(path); err == nil {
		t.Mode = uint32(fi.Mode().Perm())
	}
	switch {
	case isReadErr(tl.Err):
		t.ReadErr = tl.Err.Error()
	case tl.Err != nil:
		t.ParseErr = tl.Err.Error()
	default:
		t.Patterns = len(tl.Patterns)
	}
	return t
}

// isReadErr tells a list that could not be read (its open or read failed) from
// one that did not parse.
func isReadErr(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}

// GatherSocket says whether a socket path is free, a live node's or left over.
func GatherSocket(path string) Socket {
	s := Socket{Path: path}
	fi, err := os.Lstat(path)
	if err != nil {
		return s
	}
	s.Exists, s.IsSocket = true, fi.Mode()&fs.ModeSocket != 0
	if s.IsSocket {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			s.Answers = true
		}
	}
	return s
}

// GatherPort tries to listen on addr, as the node would.
func GatherPort(flag, addr string) Port {
	p := Port{Flag: flag, Addr: addr}
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		p.InUse = true
	case err != nil:
		p.Err = err.Error()
	default:
		ln.Close()
	}
	return p
}

// GatherClock reads the clock and the time it must be past (self's modification
// time); synced comes from the OS (-1 when unknown).
func GatherClock(self string, synced int) Clock {
	c := Clock{Now: time.Now(), Synced: synced}
	if fi, err := os.Stat(self); err == nil {
		c.NotAfter = fi.ModTime()
	}
	return c
}
