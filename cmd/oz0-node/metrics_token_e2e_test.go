package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// --metrics-listen answers only the holder of the node's metrics token
// (<data>/metrics.token, 0600): a scraper without it or with a wrong one gets
// 401, with it the metrics. Under auto a sandbox shares the host's network and
// reaches that loopback port, so a sandboxed tool is the attacker here: it gets
// 401 too, and cannot read the token file. The control socket's /metrics is
// unchanged (owner-only socket, no token).
func TestE2EMetricsListenAnswersOnlyTheTokenHolder(t *testing.T) {
	tried := false
	for _, b := range backendsForE2E(t) {
		if b == "bwrap" || b == "gvisor" {
			tried = true
			t.Run(b, func(t *testing.T) { metricsTokenUnderAuto(t, b) })
		}
	}
	if !tried {
		t.Skip("not tested: needs bwrap or gVisor (CI installs both)")
	}
}

func metricsTokenUnderAuto(t *testing.T, backend string) {
	port := freePort(t)
	e := newEgressEnvWith(t, backend, "egress-split", []string{"alpha", "beta"}, "--plugin-sandbox", "auto",
		"--metrics-listen", "127.0.0.1:"+strconv.Itoa(port))
	defer e.stop()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	tokenFile := filepath.Join(e.data, "metrics.token")
	fi, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("the node made no metrics token: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", tokenFile, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("metrics token %q, want 64 hex digits", token)
	}

	get := func(auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	wrong := token[:63] + "0"
	if wrong == token {
		wrong = token[:63] + "1"
	}
	for _, auth := range []string{"", "Bearer ", "Bearer " + wrong, "Bearer " + token + "0", "Basic " + token, token, "bearer " + token + " x"} {
		if code, body := get(auth); code != http.StatusUnauthorized || strings.Contains(body, "oz0_") {
			t.Errorf("Authorization %q: %d %.100q, want 401 and no metrics", auth, code, body)
		}
	}
	if code, body := get("Bearer " + token); code != http.StatusOK || !strings.Contains(body, "oz0_servers") {
		t.Errorf("with the token: %d %.200q, want the metrics", code, body)
	}
	fams := scrapeWith(t, "", url, token)
	if value(fams, "oz0_servers", map[string]string{"plugin": "egress-split", "state": "running"}) != 2 {
		t.Errorf("oz0_servers{egress-split,running} over --metrics-listen is not 2")
	}
	// The control socket answers as before.
	if fams := scrape(t, filepath.Join(e.data, "run", "control.sock"), ""); fams["oz0_servers"] == nil {
		t.Error("the control socket's /metrics has no oz0_servers")
	}

	// From inside a sandboxed server under auto: the port is reachable (the
	// host's network), the token is not.
	script := fmt.Sprintf(`cat %s 2>&1; echo "read:$?"; curl -s --noproxy '*' -o /dev/null -w 'status:%%{http_code}' --max-time 10 %s; echo; curl -s --noproxy '*' -o /dev/null -w 'status:%%{http_code}' --max-time 10 -H 'Authorization: Bearer guess' %s`,
		tokenFile, url, url)
	out, _ := e.inServer("egress-split", "alpha", "/bin/sh", "-c", script)
	t.Logf("inside the sandbox under auto: %q", out)
	if strings.Contains(out, token) || !strings.Contains(out, "read:1") {
		t.Errorf("a sandboxed server under auto read the metrics token file: %q", out)
	}
	if strings.Count(out, "status:401") != 2 {
		t.Errorf("a sandboxed server under auto scraping --metrics-listen: %q, want 401 twice (the port is reachable, the metrics are not)", out)
	}
}
