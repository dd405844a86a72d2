package install

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// childEnv makes the test binary run one Install or Remove (options as JSON) and
// exit: the kill and concurrency tests need installs in processes of their own.
// pauseEnv names a step (steps.go) at which that child stops and waits to be killed.
const (
	childEnv = "OZ0_INSTALL_TEST_CHILD"
	pauseEnv = "OZ0_INSTALL_TEST_PAUSE"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

type childSpec struct {
	Data    string
	Install *Options
	Remove  *RemoveOptions
	// Backend, when set, is the build sandbox's backend (childBox).
	Backend string
}

func runChild(spec string) int {
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	d, _ := datadir.New(c.Data)
	pause := pauseAt(os.Getenv(pauseEnv))
	var err error
	if c.Install != nil {
		c.Install.afterStep = pause
		if c.Backend != "" {
			c.Install.BuildSandbox = childBox(c.Backend)
		}
		var in *installed.Plugin
		in, err = Install(context.Background(), d, *c.Install)
		if err == nil {
			fmt.Println("installed", in.Name, in.Commit)
		}
	} else {
		c.Remove.afterStep = pause
		_, err = Remove(context.Background(), d, *c.Remove)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// pauseAt is a step hook that stops the process for good at step, once it has
// said so on stderr; nil when step is "".
func pauseAt(step string) func(string) {
	if step == "" {
		return nil
	}
	return func(s string) {
		if s != step {
			return
		}
		fmt.Fprintf(os.Stderr, "oz0-node: paused at install step %s\n", s)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// child starts the test binary as an install child; pause names a step to stop at.
func child(t *testing.T, d datadir.Dir, spec childSpec, pause string) *exec.Cmd {
	t.Helper()
	spec.Data = d.Root
	b, _ := json.Marshal(spec)
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), childEnv+"="+string(b))
	if pause != "" {
		c.Env = append(c.Env, pauseEnv+"="+pause)
	}
	return c
}

func newData(t *testing.T) datadir.Dir {
	t.Helper()
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func run(t *testing.T, dir string, argv ...string) string {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a git repository holding fixture plugin name (if not "") and files.
func newRepo(t *testing.T, fixture string, files map[string]string) (dir, commit string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "git", "init", "-q", "-b", "main")
	if fixture != "" {
		if _, err := fixtures.Extract(fixture, dir); err != nil {
			t.Fatal(err)
		}
	}
	return dir, commitFiles(t, dir, files)
}

// commitFiles writes files (content "" with a trailing "/" key makes a folder) and
// commits everything.
func commitFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "git", "add", "-A")
	run(t, dir, "git", "commit", "-q", "--allow-empty", "-m", "c")
	return run(t, dir, "git", "rev-parse", "HEAD")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)) }

// slogTo is a logger writing text lines into w.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func mustInstall(t *testing.T, d datadir.Dir, o Options) *installed.Plugin {
	t.Helper()
	if o.Log == nil {
		o.Log = quiet()
	}
	in, err := Install(context.Background(), d, o)
	if err != nil {
		t.Fatalf("install %s: %v", o.Source, err)
	}
	return in
}

func installErr(t *testing.T, d datadir.Dir, o Options, want string) {
	t.Helper()
	o.Log = quiet()
	_, err := Install(context.Background(), d, o)
	if err == nil {
		t.Fatalf("install %s: succeeded, want an error containing %q", o.Source, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("install %s: error %q does not contain %q", o.Source, err, want)
	}
}

// pluginJSON is a minimal valid manifest.
func pluginJSON(name string) string {
	return fmt.Sprintf(`{"name": %q, "version": "1.0.0"}`+"\n", name)
}

// builtJSON is a manifest whose server runs a script of the plugin's: the node
// cannot tell what it uses, so both the npm and the Python build are made.
func builtJSON(name string) string {
	return fmt.Sprintf(`{"name": %q, "version": "1.0.0", "mcpServers": {"main": {"command": "${CLAUDE_PLUGIN_ROOT}/run"}}}`+"\n", name)
}

// runsSomething gives a fixture whose manifest declares nothing that runs a
// server of that kind, so that its builds are made.
var runsSomething = map[string]string{".mcp.json": `{"mcpServers": {"main": {"command": "${CLAUDE_PLUGIN_ROOT}/run"}}}` + "\n"}

// makeWheel writes a pure-Python wheel (a zip with a .dist-info) into dir.
func makeWheel(t *testing.T, dir, dist, version string, requires []string, files map[string]string) string {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	info := fmt.Sprintf("%s-%s.dist-info/", dist, version)
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", dist, version)
	for _, r := range requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	all := map[string]string{
		info + "METADATA": meta + "\nA test wheel.\nRequires-Dist: not-a-header\n",
		info + "WHEEL":    "Wheel-Version: 1.0\nGenerator: oz0-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		info + "RECORD":   "",
	}
	for k, v := range files {
		all[k] = v
	}
	for k, v := range all {
		w, err := zw.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(v))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ledger(t *testing.T, d datadir.Dir, plugin string) []installed.LedgerEntry {
	t.Helper()
	es, err := installed.ReadLedger(d, plugin)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func stagingEmpty(t *testing.T, d datadir.Dir) {
	t.Helper()
	ents, _ := os.ReadDir(d.Staging())
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("staging not empty: %v", names)
	}
}

func extractFixture(name, dst string) (string, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	return fixtures.Extract(name, dst)
}
