package egress

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
)

// The in-sandbox bridge: a Linux sandbox has only loopback, so the node binary runs
// inside as reexec helper sandbox.BridgeHelper, listens on a loopback port (the one
// the proxy variables name) and forwards each connection to the plugin's proxy
// socket bound into the sandbox, then runs the tool as its child.
func init() { reexec.Register(sandbox.BridgeHelper, bridgeMain) }

// Exit codes of the bridge itself (the tool's own code is passed through).
const (
	bridgeUsage    = 2   // bad arguments
	bridgeFailed   = 125 // could not listen
	bridgeNoExec   = 126 // the tool could not be started
	bridgeNotFound = 127 // the tool was not found
)

// BridgeArgv is the bridge's command line, for backends: run argv[0] (the node
// binary as seen inside the sandbox) with argv[0] replaced by BridgeArgv0 (exec.Cmd:
// Path = result[0], Args = result with Args[0] = BridgeArgv0). The bridge listens on
// 127.0.0.1:port, forwards to innerSocket, and runs argv as its child with the
// bridge's own environment (the tool's), stdio inherited; it forwards SIGTERM,
// SIGINT and SIGHUP and exits with the tool's code (128+signal if it was killed).
//
// With handoff (bwrap, whose sandbox sockets are host sockets) the bridge first
// offers its listener to the proxy (HandOff) and relays only if that is refused.
func BridgeArgv(nodeBin string, port int, innerSocket string, handoff bool, argv []string) []string {
	out := []string{nodeBin, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--socket", innerSocket}
	if handoff {
		out = append(out, "--handoff")
	}
	out = append(out, "--")
	return append(out, argv...)
}

// BridgeArgv0 is the argv[0] that selects the bridge helper.
var BridgeArgv0 = reexec.Argv0(sandbox.BridgeHelper)

func bridgeMain(args []string) int {
	fs := flag.NewFlagSet(sandbox.BridgeHelper, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3128", "loopback address to serve the proxy on")
	sock := fs.String("socket", "", "the plugin's proxy socket")
	handoff := fs.Bool("handoff", false, "pass the listener to the proxy instead of relaying")
	if err := fs.Parse(args); err != nil {
		return bridgeUsage
	}
	argv := fs.Args()
	if *sock == "" || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "oz0 egress bridge: usage: --listen ADDR --socket PATH -- COMMAND [ARG…]")
		return bridgeUsage
	}
	// Listen before the tool starts, so its first request finds the proxy.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "oz0 egress bridge: listen %s: %v\n", *listen, err)
		return bridgeFailed
	}
	defer ln.Close()
	served := false
	if *handoff {
		// Keep the handoff connection open until the bridge exits: its end tells
		// the proxy to let the listener go.
		if hc, err := HandOff(ln.(*net.TCPListener), *sock); err == nil {
			defer hc.Close()
			ln.Close() // the proxy holds the listener now
			served = true
		} else {
			fmt.Fprintf(os.Stderr, "oz0 egress bridge: relaying (handoff not taken: %v)\n", err)
		}
	}
	if !served {
		go serveBridge(ln, *sock)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "oz0 egress bridge: start %s: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return bridgeNotFound
		}
		return bridgeNoExec
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	return exitCode(cmd, err)
}

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return bridgeNoExec
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		return code
	}
	if err != nil {
		return 1
	}
	return 0
}

// serveBridge forwards each loopback connection to the proxy socket.
func serveBridge(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: do not spin
			continue
		}
		go func() {
			up, err := net.Dial("unix", sock)
			if err != nil {
				fmt.Fprintf(os.Stderr, "oz0 egress bridge: proxy socket %s: %v\n", sock, err)
				c.Close()
				return
			}
			bridgeConns(c, up)
		}()
	}
}

// bridgeConns copies both ways with half-close, like the proxy's tunnels.
func bridgeConns(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		pipe(b, a)
		close(done)
	}()
	pipe(a, b)
	<-done
	a.Close()
	b.Close()
}
