package install

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// MaxBundleBytes bounds an MCPB bundle as fetched; unpacked, it is held to the
// plugin's own limits (MaxFiles, MaxTotalBytes).
const MaxBundleBytes = 256 << 20

// bundleFetchTimeout bounds one bundle's download.
const bundleFetchTimeout = 10 * time.Minute

// ErrBundleHash marks a bundle whose bytes are not the ones pinned.
var ErrBundleHash = errors.New("MCPB bundle hash mismatch")

// bundles fetches (or reads from the plugin) each MCPB bundle m names, checks it
// against its pin, unpacks it into BundleDir under the plugin's rules and checks
// that this node can run its server; it records each in b.bundled. pins are
// the hashes the active installation recorded, by source: a bundle that moved
// is refused unless the install re-resolves (plugin update).
func (b *builder) bundles(m *manifest.Manifest, pins map[string]string, reresolve bool) error {
	if len(m.Bundles) == 0 {
		return nil
	}
	if b.exists(manifest.BundleDir) {
		return fmt.Errorf("the plugin ships %s, the folder the node unpacks MCPB bundles into", manifest.BundleDir)
	}
	tree, err := os.OpenRoot(b.tree)
	if err != nil {
		return fmt.Errorf("open plugin tree: %w", err)
	}
	defer tree.Close()
	for _, ref := range m.Bundles {
		rec, err := b.bundle(tree, ref, pins, reresolve)
		if err != nil {
			return fmt.Errorf("MCPB bundle %s (%s): %w", ref.Source, ref.Field, err)
		}
		b.bundled = append(b.bundled, *rec)
		b.step("mcpb: %s sha256:%s (%s %s, a %s server)", rec.Source, rec.SHA256, rec.Name, rec.Version, rec.Type)
	}
	return nil
}

func (b *builder) bundle(tree *os.Root, ref manifest.Bundle, pins map[string]string, reresolve bool) (*installed.Bundle, error) {
	file, size, sum, err := b.bundleFile(tree, ref)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	switch prev, ok := pins[ref.Source]; {
	case ref.Pin != "" && sum != ref.Pin:
		return nil, fmt.Errorf("%w: its bytes have sha256 %s, and the manifest pins %s (#sha256=…)", ErrBundleHash, sum, ref.Pin)
	case ok && prev != sum && !reresolve:
		return nil, fmt.Errorf("%w: its bytes have sha256 %s, and the installed plugin pinned %s when it fetched it; if the new bundle is wanted, oz0-node plugin update %s takes it and says what moved", ErrBundleHash, sum, prev, b.plugin)
	}
	if err := tree.MkdirAll(ref.Dir(), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", ref.Dir(), err)
	}
	if err := unpackBundle(file, size, tree, ref.Dir()); err != nil {
		return nil, err
	}
	raw, err := b.readPluginFile(ref.Dir() + "/manifest.json")
	if err != nil {
		return nil, fmt.Errorf("the bundle has no manifest.json: %w", err)
	}
	bm, err := manifest.ParseBundleManifest(raw, runtime.GOOS)
	if err != nil {
		return nil, err
	}
	if err := b.canRun(tree, ref, bm); err != nil {
		return nil, err
	}
	return &installed.Bundle{Source: ref.Source, SHA256: sum, Size: size, Dir: ref.Dir(), Name: bm.Name,
		Version: bm.Version, Type: bm.Type, Server: manifest.ServerID(bm.Name)}, nil
}

// canRun refuses a bundle this node cannot run: one for other platforms, one
// whose runtime (Node.js, Python) the node has none of, one whose entry point
// it does not hold. A binary's entry point is made executable.
func (b *builder) canRun(tree *os.Root, ref manifest.Bundle, bm *manifest.BundleManifest) error {
	if !bm.SupportsThisOS() {
		return fmt.Errorf("its server is for %s, not %s (compatibility.platforms)", strings.Join(bm.Platforms, ", "), runtime.GOOS)
	}
	entry := ref.Dir() + "/" + bm.EntryPoint
	fi, err := tree.Lstat(entry)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("its server.entry_point %s is not a file of the bundle", bm.EntryPoint)
	}
	rs, err := installed.LoadRuntimes(b.d)
	if err != nil {
		return err
	}
	switch bm.Type {
	case "node":
		if rs.Node == nil {
			return fmt.Errorf("a node server needs Node.js, and this node has no managed Node.js runtime (looked for %s)", strings.Join(installed.Candidates("node"), ", "))
		}
	case "python":
		if rs.Python == nil {
			return fmt.Errorf("a python server needs Python, and this node has no managed Python runtime (looked for %s)", strings.Join(installed.Candidates("python"), ", "))
		}
	case "binary":
		if err := tree.Chmod(entry, 0o755); err != nil {
			return fmt.Errorf("make %s executable: %w", bm.EntryPoint, err)
		}
	}
	return nil
}

// bundleFile is the bundle's bytes as a file in staging (fetched, or copied out
// of the plugin), with its size and SHA-256.
func (b *builder) bundleFile(tree *os.Root, ref manifest.Bundle) (*os.File, int64, string, error) {
	f, err := os.CreateTemp(b.staging, "bundle-")
	if err != nil {
		return nil, 0, "", err
	}
	// Removed with staging; unlinked now so nothing else ever opens it.
	os.Remove(f.Name())
	var src io.Reader
	if ref.IsURL() {
		body, closeBody, err := b.fetchBundle(ref.Source)
		if err != nil {
			f.Close()
			return nil, 0, "", err
		}
		defer closeBody()
		src = body
	} else {
		in, err := tree.Open(ref.Source)
		if err != nil {
			f.Close()
			return nil, 0, "", fmt.Errorf("open %s: %w", ref.Source, err)
		}
		defer in.Close()
		if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, 0, "", fmt.Errorf("%s is not a file", ref.Source)
		}
		src = in
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(src, MaxBundleBytes+1))
	if err == nil && n > MaxBundleBytes {
		err = fmt.Errorf("larger than %d bytes", MaxBundleBytes)
	}
	if err != nil {
		f.Close()
		return nil, 0, "", fmt.Errorf("read the bundle: %w", err)
	}
	return f, n, hex.EncodeToString(h.Sum(nil)), nil
}

// fetchBundle GETs a bundle URL through an egress proxy of the install's own
// that reaches the URL's host alone (the address guard included); a redirect to
// another host is refused by name.
func (b *builder) fetchBundle(raw string) (io.Reader, func(), error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	hp, err := urlHostPort(u)
	if err != nil {
		return nil, nil, err
	}
	e, err := newInstallEgress(b.staging, "mcpb-"+b.plugin, "MCPB bundle", []hostPort{hp}, b.allowCIDRs, b.log)
	if err != nil {
		return nil, nil, err
	}
	proxy, err := e.loopback()
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, bundleFetchTimeout)
	done := func() { cancel(); e.Close() }
	c := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxy), ForceAttemptHTTP2: true},
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if !strings.EqualFold(r.URL.Host, u.Host) || r.URL.Scheme != u.Scheme {
				return fmt.Errorf("redirected to %s: a bundle is fetched from its URL's host alone (name the final URL in the manifest)", r.URL.Redacted())
			}
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			return nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		done()
		return nil, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		why := e.refusals()
		done()
		if why != "" {
			return nil, nil, fmt.Errorf("fetch: %s", why)
		}
		return nil, nil, fmt.Errorf("fetch: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		why := e.refusals()
		done()
		if why != "" {
			return nil, nil, fmt.Errorf("fetch: %s", why)
		}
		return nil, nil, fmt.Errorf("fetch: the server answered %s", resp.Status)
	}
	b.log.Info("fetching MCPB bundle", "plugin", b.plugin, "url", u.Redacted())
	return resp.Body, func() { resp.Body.Close(); done() }, nil
}

// unpackBundle writes the zip f (size bytes) into dir beneath tree, under the
// rules of a plugin tree: plain relative paths (no absolute path, no "..", no
// .git, no backslash), regular files and folders only (no link, no device), no
// name twice, and the plugin's bounds on files and bytes, held against what
// each entry really holds, not what it claims.
func unpackBundle(f *os.File, size int64, tree *os.Root, dir string) error {
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return fmt.Errorf("not a zip archive: %w", err)
	}
	if len(zr.File) > MaxFiles {
		return fmt.Errorf("the bundle has more than %d entries", MaxFiles)
	}
	var total int64
	for _, zf := range zr.File {
		name := zf.Name
		isDir := strings.HasSuffix(name, "/")
		name = strings.TrimSuffix(name, "/")
		if err := checkRelPath(name); err != nil || path.Clean(name) != name {
			return fmt.Errorf("entry %q: not a plain relative path in the bundle", zf.Name)
		}
		mode := zf.Mode()
		switch {
		case isDir || mode.IsDir():
			if err := tree.MkdirAll(dir+"/"+name, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			continue
		case mode&fs.ModeSymlink != 0:
			return fmt.Errorf("entry %s: a symlink; a bundle may hold files and folders only", name)
		case !mode.IsRegular():
			return fmt.Errorf("entry %s: a %s, not a file or folder", name, typeName(mode.Type()))
		}
		if total += int64(zf.UncompressedSize64); zf.UncompressedSize64 > MaxTotalBytes || total > MaxTotalBytes {
			return fmt.Errorf("the bundle unpacks to more than %d bytes (at %s)", MaxTotalBytes, name)
		}
		perm := os.FileMode(0o644)
		if mode&0o111 != 0 {
			perm = 0o755
		}
		rc, err := zf.Open()
		if err != nil {
			return fmt.Errorf("entry %s: %w", name, err)
		}
		// More than it declared is refused: the declared sizes are what the
		// bounds above were held to.
		cr := &countingReader{r: io.LimitReader(rc, int64(zf.UncompressedSize64)+1)}
		err = writeFile(tree, dir+"/"+name, cr, perm)
		rc.Close()
		if err != nil {
			return fmt.Errorf("entry %s: %w", name, err)
		}
		if cr.n != int64(zf.UncompressedSize64) {
			return fmt.Errorf("entry %s: holds %d bytes, and declares %d", name, cr.n, zf.UncompressedSize64)
		}
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
