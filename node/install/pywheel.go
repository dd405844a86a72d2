package install

import (
	"archive/zip"
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"oz0.ai/node/node/installed"
)

// wheel is a .whl file in the plugin's wheels/ folder or downloaded from the
// operator's index.
type wheel struct {
	file    string // path: relative to the plugin root when inTree, else absolute
	inTree  bool   // one of the plugin's own, opened beneath the plugin tree
	name    string // normalised
	dist    string // as in the file name
	version string
	tags    [3]string
}

func parseWheelName(p string) (wheel, bool) {
	base := strings.TrimSuffix(filepath.Base(p), ".whl")
	parts := strings.Split(base, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return wheel{}, false
	}
	n := len(parts)
	return wheel{file: p, name: normName(parts[0]), dist: parts[0], version: parts[1],
		tags: [3]string{parts[n-3], parts[n-2], parts[n-1]}}, true
}

// compatible reports whether a wheel's tags fit Python py ("3.X") on this OS.
func (w wheel) compatible(py string) bool {
	minor := strings.TrimPrefix(py, "3.")
	pyOK := false
	for _, t := range strings.Split(w.tags[0], ".") {
		if t == "py3" || t == "py"+"3"+minor || t == "cp3"+minor || (strings.HasPrefix(t, "cp3") && w.tags[1] == "abi3") {
			pyOK = true
		}
	}
	abiOK := false
	for _, t := range strings.Split(w.tags[1], ".") {
		if t == "none" || t == "abi3" || t == "cp3"+minor {
			abiOK = true
		}
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		arch = "arm64"
	}
	platOK := false
	for _, t := range strings.Split(w.tags[2], ".") {
		switch {
		case t == "any":
			platOK = true
		case runtime.GOOS == "linux" && strings.Contains(t, "linux") && strings.HasSuffix(t, arch) && !strings.Contains(t, "musllinux"):
			platOK = true
		case runtime.GOOS == "darwin" && strings.HasPrefix(t, "macosx") && (strings.HasSuffix(t, arch) || strings.HasSuffix(t, "universal2")):
			platOK = true
		}
	}
	return pyOK && abiOK && platOK
}

// openWheel opens a wheel: one of the plugin's own beneath the plugin tree (never
// through a link leaving it), one from the index where it was downloaded.
func openWheel(tree *os.Root, w wheel) (*zip.Reader, io.Closer, error) {
	var f *os.File
	var err error
	if w.inTree {
		f, err = tree.Open(w.file)
	} else {
		f, err = os.Open(w.file)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	var zr *zip.Reader
	if err == nil {
		zr, err = zip.NewReader(f, fi.Size())
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
	}
	return zr, f, nil
}

// wheelRequires reads Requires-Dist from a wheel's METADATA.
func wheelRequires(tree *os.Root, w wheel) ([]string, error) {
	zr, c, err := openWheel(tree, w)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, f := range zr.File {
		if path.Base(f.Name) != "METADATA" || !strings.HasSuffix(path.Dir(f.Name), ".dist-info") || strings.Count(f.Name, "/") != 1 {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
		}
		defer rc.Close()
		var out []string
		sc := bufio.NewScanner(io.LimitReader(rc, 4<<20))
		for sc.Scan() {
			l := sc.Text()
			if l == "" {
				break // the headers end; the description follows
			}
			if v, ok := strings.CutPrefix(l, "Requires-Dist:"); ok {
				out = append(out, strings.TrimSpace(v))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("wheel %s: no .dist-info/METADATA", filepath.Base(w.file))
}

// unpackWheel copies a wheel's files into SitePackages (and its scripts next to
// it), refusing paths that leave the folder, links and sizes beyond the budget.
// Every folder and file is created beneath the plugin tree (tree), never through a
// link: .oz0 must be a real folder of the tree.
func unpackWheel(tree *os.Root, w wheel, budget *int64) error {
	name := filepath.Base(w.file)
	zr, c, err := openWheel(tree, w)
	if err != nil {
		return err
	}
	defer c.Close()
	oz0 := path.Dir(installed.SitePackages)
	if fi, err := tree.Lstat(oz0); err == nil && !fi.IsDir() {
		return fmt.Errorf("wheel %s: %s is not a folder (a symlink?); the build writes only into a real %s of the plugin", name, oz0, oz0)
	}
	if err := tree.MkdirAll(installed.SitePackages, 0o755); err != nil {
		return fmt.Errorf("wheel %s: create %s: %w", name, installed.SitePackages, err)
	}
	root, err := tree.OpenRoot(oz0)
	if err != nil {
		return fmt.Errorf("wheel %s: open %s: %w", name, oz0, err)
	}
	defer root.Close()
	site := filepath.Base(installed.SitePackages)
	dataPrefix := w.dist + "-" + w.version + ".data/"
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		if err := checkRelPath(f.Name); err != nil {
			return fmt.Errorf("wheel %s: %w", name, err)
		}
		if !f.Mode().IsRegular() && f.Mode().Type() != 0 {
			return fmt.Errorf("wheel %s: %s is not a regular file", name, f.Name)
		}
		dst := path.Join(site, f.Name)
		if rest, ok := strings.CutPrefix(f.Name, dataPrefix); ok {
			kind, sub, _ := strings.Cut(rest, "/")
			switch kind {
			case "purelib", "platlib":
				dst = path.Join(site, sub)
			case "scripts":
				dst = path.Join("bin", sub)
			default:
				dst = path.Join("data", rest)
			}
		}
		if int64(f.UncompressedSize64) > *budget {
			return fmt.Errorf("wheel %s: unpacked files exceed %d bytes", name, MaxTotalBytes)
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("wheel %s: %s: %w", name, f.Name, err)
		}
		mode := os.FileMode(0o644)
		if f.Mode()&0o100 != 0 {
			mode = 0o755
		}
		lr := &io.LimitedReader{R: rc, N: *budget + 1}
		err = writeFile(root, dst, lr, mode)
		rc.Close()
		if err != nil {
			return fmt.Errorf("wheel %s: %w", name, err)
		}
		*budget = lr.N - 1
		if *budget < 0 {
			return fmt.Errorf("wheel %s: unpacked files exceed %d bytes", name, MaxTotalBytes)
		}
	}
	return nil
}
