package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Limits on what a plugin may hold. A plugin beyond them is refused: they bound the
// disk an install can fill and the time a copy takes.
const (
	MaxFiles      = 50_000
	MaxTotalBytes = 256 << 20
)

// checkRelPath refuses a path from a tree or folder that could leave the plugin or
// name git's own folder.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return fmt.Errorf("%q: not a plain relative path", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == "." || c == "..":
			return fmt.Errorf("%q: not a plain relative path", p)
		case strings.EqualFold(c, ".git"):
			return fmt.Errorf("%s: a .git entry inside the plugin tree", p)
		}
	}
	return nil
}

// checkLink refuses a symlink at rel (relative to the plugin root) whose target is
// absolute or leaves the plugin root as text. That is a first sieve only: a chain
// of links that each read as inside can still lead out once followed, which
// checkInside catches on the written tree.
func checkLink(rel, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("%s: symlink with an empty target", rel)
	}
	if len(target) > 4095 {
		return fmt.Errorf("%s: symlink target longer than 4095 bytes", rel)
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("%s: symlink to %s points outside the plugin (absolute target)", rel, target)
	}
	resolved := path.Join(path.Dir(rel), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%s: symlink to %s points outside the plugin", rel, target)
	}
	return nil
}

// checkTreeLinks refuses a tree where a path goes through a symlink (a file listed
// below a link), which would let a write land where the link points.
func checkTreeLinks(ents []treeEntry) error {
	links := map[string]bool{}
	for _, e := range ents {
		if e.mode == "120000" {
			links[e.path] = true
		}
	}
	for _, e := range ents {
		for d := path.Dir(e.path); d != "."; d = path.Dir(d) {
			if links[d] {
				return fmt.Errorf("%s: lies below the symlink %s", e.path, d)
			}
		}
	}
	return nil
}

// copyFolder copies a plain folder (a private candidate) into dst, refusing what a
// plugin must not hold: hard links, devices, FIFOs, sockets, symlinks leaving it,
// too many files or bytes. .git folders are skipped. It returns a content hash
// that stands in for a commit.
func copyFolder(src, dst string) (string, error) {
	type item struct {
		rel  string
		mode fs.FileMode
		link string
	}
	var items []item
	var total int64
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if p == src {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, src+string(filepath.Separator)))
		if de.IsDir() && strings.EqualFold(de.Name(), ".git") {
			return filepath.SkipDir
		}
		if err := checkRelPath(rel); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		it := item{rel: rel, mode: fi.Mode()}
		switch t := fi.Mode().Type(); {
		case t == 0:
			if n := linkCount(fi); n > 1 {
				return fmt.Errorf("%s: a hard link (%d names for one file); copy the file instead", rel, n)
			}
			total += fi.Size()
		case t == fs.ModeDir:
		case t == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("read symlink %s: %w", p, err)
			}
			if err := checkLink(rel, target); err != nil {
				return err
			}
			it.link = target
		default:
			return fmt.Errorf("%s: a %s, not a file, folder or symlink", rel, typeName(t))
		}
		items = append(items, it)
		if len(items) > MaxFiles {
			return fmt.Errorf("plugin has more than %d files", MaxFiles)
		}
		if total > MaxTotalBytes {
			return fmt.Errorf("plugin files exceed %d bytes in total (at %s)", MaxTotalBytes, rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Slice(items, func(i, j int) bool { return items[i].rel < items[j].rel })
	var links []treeEntry
	for _, it := range items {
		if it.link != "" {
			links = append(links, treeEntry{mode: "120000", path: it.rel})
		}
	}
	all := append([]treeEntry(nil), links...)
	for _, it := range items {
		if it.link == "" && !it.mode.IsDir() {
			all = append(all, treeEntry{mode: "100644", path: it.rel})
		}
	}
	if err := checkTreeLinks(all); err != nil {
		return "", err
	}

	srcRoot, err := os.OpenRoot(src)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", src, err)
	}
	defer srcRoot.Close()
	dstRoot, err := os.OpenRoot(dst)
	if err != nil {
		return "", fmt.Errorf("open staging folder: %w", err)
	}
	defer dstRoot.Close()
	h := sha256.New()
	for _, it := range items {
		switch {
		case it.mode.IsDir():
			fmt.Fprintf(h, "d %s\x00", it.rel)
			if err := dstRoot.MkdirAll(it.rel, 0o755); err != nil {
				return "", fmt.Errorf("create %s: %w", it.rel, err)
			}
		case it.link != "":
			fmt.Fprintf(h, "l %s\x00%s\x00", it.rel, it.link)
			if err := dstRoot.Symlink(it.link, it.rel); err != nil {
				return "", fmt.Errorf("create symlink %s: %w", it.rel, err)
			}
		default:
			mode := os.FileMode(0o644)
			if it.mode&0o100 != 0 {
				mode = 0o755
			}
			if err := copyOne(srcRoot, dstRoot, it.rel, mode, h); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:40], nil
}

// copyOne copies one regular file, checking again on the open file that it is still
// a regular file with one name (the folder may change while we copy).
func copyOne(src, dst *os.Root, rel string, mode os.FileMode, h io.Writer) error {
	f, err := src.OpenFile(rel, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() || linkCount(fi) > 1 {
		return fmt.Errorf("%s: changed into something other than a plain file while being copied", rel)
	}
	fmt.Fprintf(h, "f %s %o %d\x00", rel, mode, fi.Size())
	lim := io.LimitReader(f, MaxTotalBytes+1)
	if err := writeFile(dst, rel, io.TeeReader(lim, h), mode); err != nil {
		return err
	}
	return nil
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file (" + t.String() + ")"
}

// checkBuilt walks a tree after the build step: whatever npm or pip wrote must still
// be plain files, folders and symlinks that stay inside the plugin once followed.
func checkBuilt(dir string) error {
	if err := checkInside(dir); err != nil {
		return fmt.Errorf("after the build: %w", err)
	}
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch t := de.Type(); {
		case t == 0 || t == fs.ModeDir || t == fs.ModeSymlink:
		default:
			return fmt.Errorf("after the build: %s: a %s", rel, typeName(t))
		}
		return nil
	})
}

// buildFolders are the folders a build writes into. One the plugin ships as a
// symlink would let the build write where the link points, so it is refused by
// name; below .oz0 (the node's own folder) no symlink is accepted at all.
var buildFolders = []string{".oz0", "node_modules"}

// maxLinkSteps bounds the work of resolving every link of a tree (lookups of one
// path component each), so a tree of many long chains cannot stall an install.
const maxLinkSteps = 1 << 20

// maxLinkHops is how many links one path may pass through, as the kernel's limit.
const maxLinkHops = 40

// errLinkOutside is wrapped by every refusal of a link that leaves the plugin.
var errLinkOutside = errors.New("points outside the plugin")

// checkInside refuses a tree (the plugin's files in staging) holding a symlink
// that leads outside it once followed, link by link as the kernel would — not as
// its text reads: a chain of links that each look "inside" can still walk ".."
// past the root through a link that points back up. It also refuses a build
// folder that is a symlink. Nothing else can write to the tree while it runs.
func checkInside(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open plugin tree: %w", err)
	}
	defer root.Close()
	for _, f := range buildFolders {
		fi, err := root.Lstat(f)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink; the build writes into %s, so the plugin may not ship it as a link", f, f)
		}
	}
	steps := 0
	return fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if de.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		if p == ".oz0" || strings.HasPrefix(p, ".oz0/") {
			return fmt.Errorf("%s is a symlink inside .oz0, the folder the build writes into", p)
		}
		return resolveInside(root, p, &steps)
	})
}

// resolveInside follows the symlink at rel (relative to root) component by
// component, each folder looked up without following anything, and refuses it when
// a ".." climbs above the root, a target is absolute, or it passes through more than
// maxLinkHops links. A missing component is taken as an empty folder (the build
// may create it later): a ".." out of it returns to what exists, and the walk goes
// on there, so "node_modules/../<chain>" is followed like "<chain>".
func resolveInside(root *os.Root, rel string, steps *int) error {
	done := []string{} // resolved, link-free components below the root
	parts := strings.Split(rel, "/")
	done = append(done, parts[:len(parts)-1]...)
	todo := []string{parts[len(parts)-1]}
	hops := 0
	missing := 0 // how many of done's last components do not exist
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return fmt.Errorf("%s: symlink %w once followed (its chain climbs above the plugin root)", rel, errLinkOutside)
			}
			done = done[:len(done)-1]
			if missing > 0 {
				missing--
			}
			continue
		}
		if *steps++; *steps > maxLinkSteps {
			return fmt.Errorf("%s: too many symlinks to resolve in this plugin (more than %d lookups)", rel, maxLinkSteps)
		}
		next := path.Join(append(append([]string{}, done...), c)...)
		if missing > 0 {
			missing++
			done = append(done, c)
			continue
		}
		fi, err := root.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			missing = 1
			done = append(done, c)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: resolve symlink at %s: %w", rel, next, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if hops++; hops > maxLinkHops {
			return fmt.Errorf("%s: symlink passes through more than %d links", rel, maxLinkHops)
		}
		target, err := root.Readlink(next)
		if err != nil {
			return fmt.Errorf("%s: read symlink %s: %w", rel, next, err)
		}
		if target == "" || strings.HasPrefix(target, "/") {
			return fmt.Errorf("%s: symlink %w (%s is %q)", rel, errLinkOutside, next, target)
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return nil
}

// syncTree fsyncs every file and folder under dir, so a rename that publishes it
// cannot survive a crash while its contents do not.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("fsync %s: %w", p, err)
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", p, err)
		}
		return nil
	})
}
