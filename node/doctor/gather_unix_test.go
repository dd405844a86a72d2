//go:build unix

package doctor

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGatherPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if p := GatherPort("--mcp-listen", addr); !p.InUse || p.Err != "" {
		t.Errorf("a port in use: %+v", p)
	}
	c := portCheck(GatherPort("--mcp-listen", addr), false)
	if c.Status != Fail || !strings.Contains(c.Fix, "ss -ltnp") {
		t.Errorf("in use by another program: %+v", c)
	}
	if c := portCheck(GatherPort("--mcp-listen", addr), true); c.Status != OK {
		t.Errorf("in use by the running node: %+v", c)
	}
	ln.Close()
	if p := GatherPort("--mcp-listen", addr); p.InUse || p.Err != "" {
		t.Errorf("a free port: %+v", p)
	}
}

func TestGatherSocket(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if s := GatherSocket(live); !s.Exists || !s.IsSocket || !s.Answers {
		t.Errorf("a live socket: %+v", s)
	}
	squat := filepath.Join(dir, "file.sock")
	os.WriteFile(squat, nil, 0o600)
	if s := GatherSocket(squat); !s.Exists || s.IsSocket {
		t.Errorf("a file: %+v", s)
	}
	if s := GatherSocket(filepath.Join(dir, "none.sock")); s.Exists {
		t.Errorf("nothing: %+v", s)
	}
}

func TestGatherTenantAndDataFolder(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "egress")
	os.WriteFile(list, []byte("# tenant\napi.example.com\n.example.org:443\n"), 0o644)
	if tl := GatherTenantList(list); tl.Patterns != 2 || tl.ParseErr != "" || tl.Mode != 0o644 {
		t.Errorf("a good list: %+v", tl)
	}
	os.WriteFile(list, []byte("api.example.com\n*\n"), 0o644)
	if tl := GatherTenantList(list); !strings.Contains(tl.ParseErr, "line 2") {
		t.Errorf("a bad line: %+v", tl)
	}
	if tl := GatherTenantList(filepath.Join(dir, "none")); tl.Exists {
		t.Errorf("no list: %+v", tl)
	}

	data := filepath.Join(dir, "open", "data")
	os.MkdirAll(data, 0o711)
	os.Chmod(filepath.Join(dir, "open"), 0o777)
	d := GatherDataFolder(data)
	last := d.Chain[len(d.Chain)-1]
	if d.Chain[0].Path != "/" || last.Path != data || !last.Dir || last.Mode != 0o711 {
		t.Errorf("chain: %+v", d.Chain)
	}
	f := base()
	f.Data = d
	var found bool
	for _, c := range Evaluate(f).Checks {
		if c.Name == "data folder path" && c.Status == Fail && strings.Contains(c.Detail, filepath.Join(dir, "open")+" (mode 0777)") {
			found = true
		}
	}
	if !found {
		t.Errorf("a world-writable folder above the data folder is not reported: %+v", Evaluate(f).Checks)
	}
}
