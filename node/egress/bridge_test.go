package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
)

// The test binary doubles as the tool the bridge starts (chosen by this variable,
// which the bridge passes on to its child with the rest of its environment).
const testToolEnv = "OZ0_EGRESS_TEST_TOOL"

func testTool() int {
	switch os.Getenv(testToolEnv) {
	case "fetch":
		// Go's client honours HTTP_PROXY as a sandboxed tool's would.
		resp, err := http.Get(os.Getenv("OZ0_TEST_URL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fetch:", err)
			return 3
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("status=%d body=%s\n", resp.StatusCode, b)
		return 7
	case "wait":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGHUP) // SIGHUP is caught: forwarded, not fatal
		fmt.Println("ready")             // only once the handler is in place
		for {
			select {
			case <-c:
				fmt.Println("got SIGHUP")
			case <-time.After(30 * time.Second):
				return 1
			}
		}
	}
	return 99
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func bridgeCmd(t *testing.T, port int, sock, tool string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := sandbox.BridgeArgv(self, port, sock, false, "", []string{self})
	cmd := &exec.Cmd{Path: argv[0], Args: append([]string{bridgeArgv0}, argv[1:]...)}
	proxy := fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd.Env = append([]string{testToolEnv + "=" + tool, "HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "NO_PROXY="}, extraEnv...)
	return cmd
}

// The bridge, run as a real re-executed process, serves the proxy on a loopback
// port, starts the tool with its environment, and exits with the tool's code.
func TestBridgeForwardsToProxySocketAndPassesExitCode(t *testing.T) {
	f := newFixture(t, true, nil)
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	cmd := bridgeCmd(t, freePort(t), f.ep.Socket, "fetch", "OZ0_TEST_URL="+hostURL(srv, hostBoth)+"/via-bridge")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("bridge: %v (want exit 7)\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	want := "status=200 body=hello from " + hostBoth + ":" + port(srv) + "/via-bridge"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("tool output %q, want %q (stderr %s)", out.String(), want, errb.String())
	}
	if d := f.p.Recent(1); len(d) != 1 || d[0].Plugin != "alpha" || d[0].Decision != "allow" {
		t.Fatalf("decision: %+v", d)
	}
}

// Signals reach the tool through the bridge; a tool killed by one makes the bridge
// exit 128+signal.
func TestBridgeForwardsSignals(t *testing.T) {
	f := newFixture(t, true, nil)
	cmd := bridgeCmd(t, freePort(t), f.ep.Socket, "wait")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				lines <- string(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	wait := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if !strings.Contains(l, want) {
				t.Fatalf("tool said %q, want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("tool did not say %q", want)
		}
	}
	wait("ready")
	cmd.Process.Signal(syscall.SIGHUP)
	wait("got SIGHUP")
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	pw.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("bridge exit: %v, want %d", err, 128+int(syscall.SIGTERM))
	}
}

func TestBridgeUsageAndMissingTool(t *testing.T) {
	if code := bridgeMain([]string{"--listen", "127.0.0.1:0"}); code != bridgeUsage {
		t.Fatalf("no socket, no command: exit %d, want %d", code, bridgeUsage)
	}
	if code := bridgeMain([]string{"--listen", "127.0.0.1:0", "--socket", "/nonexistent", "--", "/nonexistent/tool"}); code != bridgeNotFound {
		t.Fatalf("missing tool: exit %d, want %d", code, bridgeNotFound)
	}
	got := sandbox.BridgeArgv("/run/oz0-bin/oz0-node", 3128, "/run/oz0-egress/egress.sock", false, "", []string{"python3", "-m", "srv"})
	want := "/run/oz0-bin/oz0-node --listen 127.0.0.1:3128 --socket /run/oz0-egress/egress.sock -- python3 -m srv"
	if strings.Join(got, " ") != want || bridgeArgv0 != "oz0:egress-bridge" {
		t.Fatalf("sandbox.BridgeArgv = %q, argv0 %q", got, bridgeArgv0)
	}
}

// bridgeArgv0 is the argv[0] that selects the bridge helper when the test binary
// runs itself.
var bridgeArgv0 = reexec.Argv0(sandbox.BridgeHelper)
