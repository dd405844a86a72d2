package daemon_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/mcpdoor"
	"oz0.ai/node/node/policy"
)

// handedPipes is a client's side of a session handed to the node as `oz0-node
// mcp` hands it: the client writes the node's input and reads its output; sock
// is the bridge's connection, which then only hears of the session's end.
type handedPipes struct {
	w    *os.File // the client's end of the node's input
	r    *os.File // the client's end of the node's output
	sock *net.UnixConn
	rest *bufio.Reader // the socket after the node's acceptance
}

func (p *handedPipes) Read(b []byte) (int, error)        { return p.r.Read(b) }
func (p *handedPipes) Write(b []byte) (int, error)       { return p.w.Write(b) }
func (p *handedPipes) SetReadDeadline(t time.Time) error { return p.r.SetReadDeadline(t) }

// ended is what the node tells the bridge when the session ends ("" when the
// socket closed without a word).
func (p *handedPipes) ended(t *testing.T) string {
	t.Helper()
	p.sock.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := p.rest.ReadString('\n')
	return strings.TrimSpace(line)
}

// handOff connects to the node's stdio endpoint and hands it a new pair of
// pipes, as the bridge hands its stdin and stdout.
func (n *node) handOff(t *testing.T, agentHooks bool) *handedPipes {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	sock := c.(*net.UnixConn)
	req := mcpdoor.HandoffRequest
	if agentHooks {
		req = mcpdoor.HandoffRequestAgentHooks
	}
	if _, _, err := sock.WriteMsgUnix([]byte(req+"\n"), unix.UnixRights(int(inR.Fd()), int(outW.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	// The node holds its own copies now.
	inR.Close()
	outW.Close()
	p := &handedPipes{w: inW, r: outR, sock: sock, rest: bufio.NewReader(sock)}
	t.Cleanup(func() { inW.Close(); outR.Close(); sock.Close() })
	sock.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := p.rest.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != mcpdoor.HandoffAccepted {
		t.Fatalf("the node did not take the pipes: %v %q", err, line)
	}
	sock.SetReadDeadline(time.Time{})
	return p
}

// handedClient is an MCP client session on pipes handed to the node.
func handedClient(t *testing.T, p *handedPipes) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: p.r, Writer: p.w}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// waitEnded waits for the client's session to end: its output closed.
func waitEnded(t *testing.T, cs *mcp.ClientSession, why string) {
	t.Helper()
	done := make(chan struct{})
	go func() { cs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("the client's session did not end %s", why)
	}
}

// A bridge's pipes handed to the node carry the session: the node reads and
// writes them itself, calls in flight side by side; the client closing its input
// ends the session, and the bridge is told it ended cleanly.
func TestStdioHandoffServesTheClientsPipes(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	before := n.metric(t, "oz0_mcp_stdio_sessions_handed_off")
	p := n.handOff(t, false)
	if got := n.metric(t, "oz0_mcp_stdio_sessions_handed_off"); got != before+1 {
		t.Errorf("handed-off sessions: %v, want %v", got, before+1)
	}
	cs := handedClient(t, p)
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
	p.w.Close()
	if got := p.ended(t); got != mcpdoor.HandoffEnded {
		t.Errorf("the bridge was told %q; want %s", got, mcpdoor.HandoffEnded)
	}
	waitEnded(t, cs, "with its input")
	if got := n.metric(t, "oz0_mcp_stdio_sessions_handed_off"); got != before {
		t.Errorf("handed-off sessions after the session ended: %v, want %v", got, before)
	}
}

// The bridge gone (its client killed it), the session ends: its calls in
// flight end and the client's output closes.
func TestStdioHandoffEndsWithTheBridge(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	p := n.handOff(t, false)
	cs := handedClient(t, p)
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__hang", Arguments: map[string]any{}})
	ended := func() bool {
		return n.metric(t, `oz0_tool_calls_total{outcome="error",plugin="unruly"}`) == 1
	}
	time.Sleep(300 * time.Millisecond) // the call reaches the server
	if ended() {
		t.Fatal("the hanging call ended on its own")
	}
	p.sock.Close()
	waitFor(t, 10*time.Second, "the gone bridge's call to end", ended)
	waitEnded(t, cs, "with the bridge")
}

// Handed-off sessions count against the session caps as relayed ones do: a
// client past its cap loses its session idle longest, whose bridge is told the
// node ended it, and its client's output closes.
func TestStdioHandoffSessionsPerClientCap(t *testing.T) {
	n := startRun(t, config.Run{Mode: policy.Strict, SessionCap: 100, SessionCapPerClient: 2}, 0, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	var ps []*handedPipes
	var css []*mcp.ClientSession
	for range 3 {
		p := n.handOff(t, false)
		css = append(css, handedClient(t, p))
		ps = append(ps, p)
		time.Sleep(5 * time.Millisecond)
	}
	if got := ps[0].ended(t); got != "" && got != mcpdoor.HandoffEndedByNode {
		t.Errorf("the oldest session's bridge was told %q; want the node's end", got)
	}
	waitEnded(t, css[0], "over the cap")
	for i, p := range ps[1:] {
		p.sock.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := p.sock.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("session %d (one of the 2 newest) ended: %v", i+1, err)
		}
	}
}

// Pipes the node cannot take (a file, not a pipe) are refused with an answer,
// so the bridge relays instead.
func TestStdioHandoffRefusesAFile(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix([]byte(mcpdoor.HandoffRequest+"\n"), unix.UnixRights(int(f.Fd()), int(f.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, `"error"`) || strings.Contains(line, mcpdoor.HandoffAccepted) {
		t.Errorf("handoff of a file: %v %q; want a refusal", err, line)
	}
}
