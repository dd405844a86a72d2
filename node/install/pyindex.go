package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"oz0.ai/node/internal/lazyre"
)

// A Python package index the operator configured (PEP 503 "simple" pages) is read
// here in Go: the page lists files, a compatible wheel is downloaded and its sha256
// checked. Only wheels are ever taken, so nothing is built and nothing runs.

var anchorRE = lazyre.New(`(?is)<a\s([^>]*)>([^<]*)</a>`)
var hrefRE = lazyre.New(`(?is)href\s*=\s*"([^"]*)"`)

// indexWheel finds the best wheel for r on the index and downloads it into dir.
// It returns ok=false when the index has none that fits.
func indexWheel(ctx context.Context, index string, r requirement, py, dir string) (wheel, bool, error) {
	base, err := url.Parse(strings.TrimSuffix(index, "/") + "/" + r.name + "/")
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") {
		return wheel{}, false, fmt.Errorf("--python-index %q: not an http(s) URL", index)
	}
	page, err := httpGet(ctx, base.String(), 8<<20)
	if err != nil {
		return wheel{}, false, fmt.Errorf("python dependency %s: index %s: %w", r.name, base, err)
	}
	var best *wheel
	var bestURL *url.URL
	for _, m := range anchorRE.FindAllStringSubmatch(string(page), -1) {
		attrs := m[1]
		if strings.Contains(strings.ToLower(attrs), "data-yanked") {
			continue
		}
		hm := hrefRE.FindStringSubmatch(attrs)
		if hm == nil {
			continue
		}
		ref, err := base.Parse(html.UnescapeString(hm[1]))
		if err != nil {
			continue
		}
		file := path.Base(ref.Path)
		if !strings.HasSuffix(file, ".whl") || strings.ContainsAny(file, "/\\") {
			continue
		}
		w, ok := parseWheelName(file)
		if !ok || w.name != r.name || !w.compatible(py) {
			continue
		}
		fits := true
		for _, sp := range r.specs {
			fits = fits && versionSatisfies(w.version, sp)
		}
		if fits && (best == nil || cmpRelease(releaseOf(w.version), releaseOf(best.version)) > 0) {
			w := w
			best, bestURL = &w, ref
		}
	}
	if best == nil {
		return wheel{}, false, nil
	}
	want := ""
	if h, ok := strings.CutPrefix(bestURL.Fragment, "sha256="); ok {
		want = strings.ToLower(h)
	}
	bestURL.Fragment = ""
	body, err := httpGet(ctx, bestURL.String(), MaxTotalBytes)
	if err != nil {
		return wheel{}, false, fmt.Errorf("python dependency %s: download %s: %w", r.name, bestURL, err)
	}
	sum := sha256.Sum256(body)
	if want != "" && hex.EncodeToString(sum[:]) != want {
		return wheel{}, false, fmt.Errorf("python dependency %s: %s does not match the index's sha256", r.name, path.Base(bestURL.Path))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return wheel{}, false, err
	}
	best.file = filepath.Join(dir, path.Base(bestURL.Path))
	if err := os.WriteFile(best.file, body, 0o600); err != nil {
		return wheel{}, false, err
	}
	return *best, true, nil
}

func httpGet(ctx context.Context, u string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil // the index does not know the project: no page, no wheels
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}
