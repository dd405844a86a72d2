package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// corruptions are the fault battery's shapes of a broken state file.
var corruptions = []struct {
	name string
	do   func(t *testing.T, path string)
}{
	{"garbage", func(t *testing.T, p string) { replace(t, p, []byte("\x00\xff{not json at all\n")) }},
	{"empty", func(t *testing.T, p string) { replace(t, p, nil) }},
	{"missing", func(t *testing.T, p string) { os.Remove(p) }},
	{"oversized", func(t *testing.T, p string) {
		replace(t, p, []byte(`{"x":"`+strings.Repeat("x", 5<<20)+`"}`))
	}},
	{"dangling-link", func(t *testing.T, p string) {
		os.Remove(p)
		if err := os.Symlink(filepath.Base(p)+".gone", p); err != nil {
			t.Fatal(err)
		}
	}},
}

// replace makes path a regular file holding b (a link or a folder there goes).
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	os.Remove(path)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// parses says whether a file is there and holds one JSON value.
func parses(path string) bool {
	b, err := os.ReadFile(path)
	var v any
	return err == nil && json.Unmarshal(b, &v) == nil
}

// Every state file the node reads at start, broken in each of the battery's
// ways, is either a cache the node rebuilds (with a log line) or a record whose
// plugin is held back with a finding naming the file, shown in status and in
// every call's answer — never a plugin that silently vanishes or servers that
// silently stop. The node's key is a record too: a broken one stops the start
// with an error naming it.
func TestE2EEveryStateFileIsACacheOrARecord(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(t)
			flags := []string{"--backend", "bwrap", "--metrics-listen", "127.0.0.1:" + strconv.Itoa(port)}
			n := newE2E(t, []string{"demo", "unruly", "egress-demo", "twin-one"}, flags...)
			for _, p := range []string{"demo", "unruly", "egress-demo", "twin-one"} {
				n.waitState(p, mainServer(p), api.StateRunning, api.StateUnsandboxed)
			}
			n.stop()
			d, _ := datadir.New(n.data)
			unruly, err := installed.Lookup(d, "unruly")
			if err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Join(d.Root, "config"), 0o700)
			os.WriteFile(filepath.Join(d.Root, "config", "egress-demo.json"), []byte(`{"SOME_KEY": "v"}`), 0o600)
			// An install older than a minute: a `current` lost now is not a first
			// install under way.
			old := time.Now().Add(-time.Hour)
			for _, p := range []string{"demo", "unruly"} {
				in, _ := installed.Lookup(d, p)
				os.Chtimes(filepath.Join(d.Plugin(p), in.Commit+".json"), old, old)
			}

			files := map[string]string{
				"runtimes":     d.Runtimes(),
				"probe":        d.ProbeCache(),
				"tools":        d.LastTools("twin-one"),
				"current":      d.Current("demo"),
				"record":       filepath.Join(d.Plugin("unruly"), unruly.Commit+".json"),
				"values":       filepath.Join(d.Root, "config", "egress-demo.json"),
				"metricsToken": d.MetricsToken(),
				"ledger":       d.Ledger(),
			}
			for _, f := range files {
				c.do(t, f)
			}
			n.start(flags...)
			st := n.status()
			log := n.log.String()

			// Caches: rebuilt, with a log line where one was there and unreadable.
			n.waitState("twin-one", "main", api.StateRunning, api.StateUnsandboxed)
			for _, name := range []string{"runtimes", "probe", "tools"} {
				deadline := time.Now().Add(10 * time.Second)
				for !parses(files[name]) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if !parses(files[name]) {
					t.Errorf("cache %s (%s) not rebuilt", name, files[name])
				}
			}
			if c.name == "garbage" || c.name == "empty" || c.name == "oversized" {
				for _, want := range []string{"managed runtimes cache unreadable", "last tool list unreadable"} {
					if !strings.Contains(log, want) {
						t.Errorf("no log line %q", want)
					}
				}
			}
			// Every server the runtimes cache serves runs again.
			n.waitState("twin-one", "main", api.StateRunning, api.StateUnsandboxed)

			// Records: the plugin is held back, a finding names the file, status
			// lists it, and a call of its tool says why.
			held := func(plugin, file string) {
				t.Helper()
				var p api.Plugin
				for _, x := range st.Plugins {
					if x.Name == plugin {
						p = x
					}
				}
				if p.Name == "" || p.Held == "" {
					t.Errorf("%s: not listed as held in status: %+v", plugin, p)
				}
				f, ok := findingOf(st, api.CodeRecordUnreadable, plugin)
				if !ok || !strings.Contains(f.Message, file) {
					t.Errorf("%s: finding %+v (present %v), want one naming %s", plugin, f, ok, file)
				}
				out, err := n.oz("call", plugin+"__echo", "--arg", "text=x", "--timeout", "10s")
				if err == nil || !strings.Contains(out, "held back") {
					t.Errorf("%s: a call answered %v %q, want why it is held back", plugin, err, out)
				}
			}
			held("demo", files["current"])
			held("unruly", files["record"])
			switch c.name {
			case "missing", "dangling-link":
				// No values set: the plugin runs (a value it needed would raise
				// needs-config).
				n.waitState("egress-demo", "fetcher", api.StateRunning, api.StateUnsandboxed)
			default:
				held("egress-demo", files["values"])
			}
			if out, err := n.oz("status"); err != nil || !strings.Contains(out, "HELD BACK") {
				t.Errorf("oz0-node status does not say a plugin is held back: %v\n%s", err, out)
			}

			// The metrics token: a usable one, that the listener takes.
			tok, _ := os.ReadFile(files["metricsToken"])
			req, _ := http.NewRequest("GET", "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 || len(tok) > 100 {
				t.Errorf("metrics token after %s: %v %v (%d bytes)", c.name, err, resp, len(tok))
			} else {
				resp.Body.Close()
			}

			// The ledger: what cannot be read is skipped and said; the start
			// recorded what the records show, so it agrees with them.
			h, err := installed.ReadLedgerHistory(d, "")
			if err != nil {
				t.Fatalf("ledger: %v", err)
			}
			if (c.name == "garbage" || c.name == "oversized") && len(h.Skipped) == 0 {
				t.Error("the broken ledger line was not reported as skipped")
			}
			last := map[string]string{}
			for _, e := range h.Entries {
				if e.Phase != installed.PhaseAbandoned {
					last[e.Plugin] = e.Commit
				}
			}
			for _, p := range []string{"egress-demo", "twin-one"} {
				if in, err := installed.Lookup(d, p); err != nil || last[p] != in.Commit {
					t.Errorf("ledger after %s: %s at %q, the records %+v %v", c.name, p, last[p], in, err)
				}
			}
			if out, err := n.oz("plugin", "show", "twin-one"); err != nil || (c.name == "garbage" || c.name == "oversized") && !strings.Contains(out, "skipped") {
				t.Errorf("plugin show after a %s ledger: %v\n%s", c.name, err, out)
			}
		})
	}
}

// The node's key is a record: broken, the node does not start and says which
// file; missing (or a dangling link), a new one is made.
func TestE2EBrokenNodeKeyStopsTheStartNamingIt(t *testing.T) {
	bin := buildBinary(t)
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			os.Chmod(parent, 0o711)
			data := filepath.Join(parent, "data")
			d, _ := datadir.New(data)
			if err := d.Create(os.Geteuid() == 0); err != nil {
				t.Fatal(err)
			}
			c.do(t, d.Key())
			cmd := exec.Command(bin, "--data-dir", data, "run", "--backend", "none", "--log-format", "text")
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				cmd.Process.Signal(os.Interrupt)
				<-done
			}()
			switch c.name {
			case "missing", "dangling-link":
				deadline := time.Now().Add(30 * time.Second)
				for {
					if _, err := api.NewClient(d.Control()).Status(t.Context()); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("node did not start:\n%s", out.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
				if _, err := d.EnsureKey(); err != nil {
					t.Errorf("no usable key after the start: %v", err)
				}
			default:
				select {
				case err := <-done:
					done <- err
					if err == nil || !strings.Contains(out.String(), d.Key()) {
						t.Errorf("the node with a %s key: %v\n%s", c.name, err, out.String())
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("the node started with a %s key", c.name)
				}
			}
		})
	}
}

// mainServer is the server name of a fixture plugin used here.
func mainServer(plugin string) string {
	if plugin == "egress-demo" {
		return "fetcher"
	}
	return "main"
}
