//go:build linux || darwin

package mcpdoor_test

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"oz0.ai/node/node/mcpdoor"
)

// A client's pipes handed over the stdio door (as `oz0-node mcp` hands its
// stdin and stdout) carry a session the node serves itself, through the same
// checks and hooks as every door, its marks kept; the client closing its input
// ends it, and the bridge is told so.
func TestHandedPipesMeetTheChecksAndKeepTheirMarks(t *testing.T) {
	d := serve(t, mcpdoor.Options{})
	for _, agentHooks := range []bool{false, true} {
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", d.stdio)
		if err != nil {
			t.Fatal(err)
		}
		sock := c.(*net.UnixConn)
		req := mcpdoor.HandoffRequest
		if agentHooks {
			req = mcpdoor.HandoffRequestAgentHooks
		}
		handed := d.metric(t, "oz0_mcp_stdio_sessions_handed_off")
		if _, _, err := sock.WriteMsgUnix([]byte(req+"\n"), unix.UnixRights(int(inR.Fd()), int(outW.Fd())), nil); err != nil {
			t.Fatal(err)
		}
		inR.Close()
		outW.Close()
		rest := bufio.NewReader(sock)
		sock.SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := rest.ReadString('\n'); err != nil || strings.TrimSpace(line) != mcpdoor.HandoffAccepted {
			t.Fatalf("the pipes were not taken: %v %q", err, line)
		}
		if got := d.metric(t, "oz0_mcp_stdio_sessions_handed_off"); got != handed+1 {
			t.Errorf("handed-off sessions: %v, want %v", got, handed+1)
		}
		cs := connect(t, &mcp.IOTransport{Reader: outR, Writer: inW})
		checked, hooked := d.b.checked.Load(), d.b.hooked.Load()
		if res := call(t, cs, "demo__echo"); res.IsError {
			t.Fatalf("demo__echo refused: %+v", res.Content)
		}
		if res := call(t, cs, "demo__refused"); !res.IsError {
			t.Fatalf("demo__refused answered: %+v", res.Content)
		}
		if got := d.b.checked.Load() - checked; got != 2 {
			t.Errorf("checks: %d, want 2", got)
		}
		want := int64(1)
		if agentHooks {
			want = 0
		}
		if got := d.b.hooked.Load() - hooked; got != want {
			t.Errorf("agent hooks %v: PreToolUse hooks run: %d, want %d", agentHooks, got, want)
		}
		inW.Close() // the client's input ends
		if line, err := rest.ReadString('\n'); err != nil || strings.TrimSpace(line) != mcpdoor.HandoffEnded {
			t.Errorf("the bridge was told %q (%v); want %s", line, err, mcpdoor.HandoffEnded)
		}
		if got := d.metric(t, "oz0_mcp_stdio_sessions_handed_off"); got != handed {
			t.Errorf("handed-off sessions after the session ended: %v, want %v", got, handed)
		}
		outR.Close()
		sock.Close()
	}
}
