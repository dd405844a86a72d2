package daemon_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// stdioClient is an MCP client on the node's stdio endpoint, as `oz0-node mcp`
// relays it.
func (n *node) stdioClient(t *testing.T) *mcp.ClientSession {
	t.Helper()
	return n.stdioClientWith(t, nil)
}

// The stdio endpoint serves the gateway, with calls in flight side by side.
func TestStdioEndpointServesConcurrentCalls(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	cs := n.stdioClient(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				want := strings.Repeat("x", i) + strings.Repeat("y", j)
				if out, isErr := call(t, cs, "demo__echo", map[string]any{"text": want}); isErr || out != want {
					t.Errorf("echo %q: %q (error %v)", want, out, isErr)
				}
			}
		})
	}
	wg.Wait()
}

// stdioAnswerAs connects to sock as uid and sends initialize; it returns what the
// node answered ("" when it closed the connection without a word).
func stdioAnswerAs(t *testing.T, sock string, uid uint32) (string, error) {
	t.Helper()
	script := `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("CONNECT-REFUSED", e.errno); sys.exit(0)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}\n')
except OSError as e:
    print("WRITE-ERROR", e.errno); sys.exit(0)
data = b""
try:
    while not data.endswith(b"\n"):
        b = s.recv(65536)
        if not b: break
        data += b
except OSError as e:
    print("READ-ERROR", e.errno); sys.exit(0)
sys.stdout.write(data.decode())
`
	cmd := exec.Command("/usr/bin/python3", "-c", script, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Only the node's own user (and root) may use the stdio endpoint: another user
// is kept out by the socket's mode and, should the socket ever be reachable (it
// exists under the umask's mode before it is narrowed), by the peer check.
func TestStdioEndpointRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: connecting as another user needs root")
	}
	n := start(t, policy.Off, 1, nil, "demo")
	sock := n.d.MCPStdio()
	const other = 1_900_000_777
	out, err := stdioAnswerAs(t, sock, 0)
	if err != nil || !strings.Contains(out, `"result"`) {
		t.Fatalf("root's initialize: %v %q", err, out)
	}
	// Let the other user reach the socket's folder.
	for p := filepath.Dir(sock); strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSticky == 0 {
			os.Chmod(p, fi.Mode().Perm()|0o011)
		}
	}
	out, err = stdioAnswerAs(t, sock, other)
	if err != nil || !strings.HasPrefix(out, "CONNECT-REFUSED") {
		t.Errorf("another user through the socket's mode: %v %q", err, out)
	}
	// The window before the mode is narrowed, held open.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	out, err = stdioAnswerAs(t, sock, other)
	if err != nil || strings.Contains(out, "result") || strings.HasPrefix(out, "CONNECT-REFUSED") {
		t.Errorf("another user on a reachable socket was served or not connected: %v %q", err, out)
	}
}

// A caller that goes away ends its calls in flight: a call of a tool that never
// answers does not outlive the connection that made it.
func TestStdioEndpointEndsCallsOfAGoneCaller(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__hang", Arguments: map[string]any{}})
	ended := func() bool {
		return n.metric(t, `oz0_tool_calls_total{outcome="error",plugin="unruly"}`) == 1
	}
	time.Sleep(300 * time.Millisecond) // the call reaches the server
	if ended() {
		t.Fatal("the hanging call ended on its own")
	}
	c.Close()
	waitFor(t, 10*time.Second, "the gone caller's call to end", ended)
}
