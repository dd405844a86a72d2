package probe

import (
	"os"
	"path/filepath"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/sandbox"
)

func probeCacheDir(t *testing.T) datadir.Dir {
	t.Helper()
	d, err := datadir.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A verdict is used only under the key it was found under: a changed kernel, tool
// or node binary, or another user, makes every backend count as unprobed.
func TestProbeCacheTrustsOnlyItsOwnKey(t *testing.T) {
	d := probeCacheDir(t)
	key := currentKey(testPlatform)
	c := loadCacheKey(d, key)
	if _, ok := c.cached("bwrap"); ok {
		t.Fatal("an empty data folder's cache claims bwrap works")
	}
	c.record(sandbox.Probe{Name: "bwrap", Works: true, Version: "bubblewrap 0.8.0"})
	c.record(sandbox.Probe{Name: "gvisor", Works: false})
	c.save()
	fi, err := os.Stat(d.ProbeCache())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("probe cache mode %v, want owner-only 0600", fi.Mode().Perm())
	}
	if p, ok := loadCacheKey(d, key).cached("bwrap"); !ok || p.Version != "bubblewrap 0.8.0" {
		t.Errorf("the same key does not find bwrap's verdict: %v %+v", ok, p)
	}
	if _, ok := loadCacheKey(d, key).cached("gvisor"); ok {
		t.Error("a failed probe was cached as working")
	}
	changed := map[string]func(k *cacheKey){
		"kernel":      func(k *cacheKey) { k.Kernel = "0.0.0-other" },
		"bwrap inode": func(k *cacheKey) { id := k.Tools["bwrap"]; id.Inode++; k.Tools["bwrap"] = id },
		"bwrap mtime": func(k *cacheKey) { id := k.Tools["bwrap"]; id.MTimeNS++; k.Tools["bwrap"] = id },
		"bwrap path":  func(k *cacheKey) { id := k.Tools["bwrap"]; id.Path = "/opt/bwrap"; k.Tools["bwrap"] = id },
		"node size":   func(k *cacheKey) { k.Node.Size++ },
		"user":        func(k *cacheKey) { k.EUID++ },
	}
	for name, change := range changed {
		k := currentKey(testPlatform)
		if k.Tools["bwrap"] == (fileID{}) {
			k.Tools["bwrap"] = fileID{Path: "/usr/bin/bwrap"}
		}
		c := loadCacheKey(d, k)
		c.record(sandbox.Probe{Name: "bwrap", Works: true})
		c.save()
		change(&k)
		if _, ok := loadCacheKey(d, k).cached("bwrap"); ok {
			t.Errorf("%s changed: the cache still claims bwrap works", name)
		}
	}
}

// What the node did not write is not read: a garbled file, one others may write,
// or one of another version.
func TestProbeCacheIgnoresGarbledOrForeignFiles(t *testing.T) {
	d := probeCacheDir(t)
	key := currentKey(testPlatform)
	c := loadCacheKey(d, key)
	c.record(sandbox.Probe{Name: "bwrap", Works: true})
	c.save()
	good, err := os.ReadFile(d.ProbeCache())
	if err != nil {
		t.Fatal(err)
	}
	for name, write := range map[string]func(){
		"garbled":        func() { os.WriteFile(d.ProbeCache(), good[:len(good)/2], 0o600) },
		"group-writable": func() { os.WriteFile(d.ProbeCache(), good, 0o600); os.Chmod(d.ProbeCache(), 0o620) },
		"unknown field": func() {
			os.WriteFile(d.ProbeCache(), append(append([]byte(nil), good[:len(good)-2]...), `,"trust":true}`+"\n"...), 0o600)
		},
		"another version": func() { os.WriteFile(d.ProbeCache(), []byte(`{"v":99,"key":{},"works":{"bwrap":{}}}`), 0o600) },
		"a folder":        func() { os.Remove(d.ProbeCache()); os.Mkdir(d.ProbeCache(), 0o700) },
		"another owner's": func() {
			os.WriteFile(d.ProbeCache(), good, 0o600)
			if os.Geteuid() == 0 {
				os.Chown(d.ProbeCache(), 65534, 65534)
			} else {
				os.Chmod(d.ProbeCache(), 0o644) // not root: cannot give a file away; mode stands in
			}
		},
	} {
		os.RemoveAll(d.ProbeCache())
		write()
		if _, ok := loadCacheKey(d, key).cached("bwrap"); ok {
			t.Errorf("%s cache file: trusted", name)
		}
	}
	// The control: the good file is trusted.
	os.RemoveAll(d.ProbeCache())
	if err := datadir.WriteFileAtomic(d.ProbeCache(), good, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := loadCacheKey(d, key).cached("bwrap"); !ok {
		t.Error("the node's own cache file is not trusted")
	}
	if m, _ := filepath.Glob(filepath.Join(d.Root, ".probe.json.tmp-*")); len(m) > 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
}

// testPlatform has no backends: the key is the kernel, the node binary and the
// user; the tests add a tool where they need one.
var testPlatform = Platform{}
