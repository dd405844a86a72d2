package egress

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
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

// The bridge's command line is sandbox.BridgeArgv; bridgeMain parses it.

func bridgeMain(args []string) int {
	fs := flag.NewFlagSet(sandbox.BridgeHelper, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3128", "loopback address to serve the proxy on")
	sock := fs.String("socket", "", "the plugin's proxy socket")
	handoff := fs.Bool("handoff", false, "pass the listener to the proxy instead of relaying")
	resolver := fs.String("resolver", "", "serve transparent egress: the sandbox's resolver address (a gate)")
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
	if *resolver != "" {
		// The resolver answers before the tool starts, or the tool does not start.
		a, err := netip.ParseAddr(*resolver)
		if err != nil {
			fmt.Fprintf(os.Stderr, "oz0 egress bridge: --resolver %q: %v\n", *resolver, err)
			return bridgeUsage
		}
		g := &Gate{Socket: *sock, Resolver: a, Logf: func(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }}
		if err := g.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "oz0 egress bridge: %v\n", err)
			return bridgeFailed
		}
		defer g.Close()
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
