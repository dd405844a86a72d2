package egress

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ListenInNetns opens a TCP listener inside the network namespace at nsPath (a
// sandbox's /proc/PID/ns/net), for Listen.Listener: the tool then reaches the proxy
// on its own loopback with no bridge hop. It needs CAP_SYS_ADMIN over that
// namespace (a root node; others use OpenNetns). bwrap sandboxes only: gVisor's
// loopback lives in its own network stack, where only the bridge reaches.
func ListenInNetns(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(nsPath, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}, func() {
		if ln != nil {
			ln.Close()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s on %s: %w", nsPath, addr, err)
	}
	return ln, nil
}

// listenPacketInNetns is ListenInNetns for a UDP socket.
func listenPacketInNetns(nsPath, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNetns(nsPath, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	}, func() {
		if pc != nil {
			pc.Close()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s on udp %s: %w", nsPath, addr, err)
	}
	return pc, nil
}

// inNetns runs open on an OS thread switched into the network namespace at nsPath:
// sockets it creates belong to that namespace for their whole life. undo releases
// what open made when the thread cannot switch back.
func inNetns(nsPath string, open func() error, undo func()) error {
	ch := make(chan error, 1)
	go func() {
		// The thread switches namespace; it is handed back to the scheduler only if
		// it is switched back, otherwise it ends with this goroutine.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("own namespace: %w", err)
			return
		}
		defer home.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		oerr := open()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			undo()
			ch <- fmt.Errorf("return to own namespace: %w", err)
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		ch <- oerr
	}()
	return <-ch
}

// netnsOpenerFor opens a sandbox's transparent-egress sockets in its namespace.
func netnsOpenerFor(nsPath string) netnsOpener {
	return netnsOpener{
		tcp: func(addr string) (net.Listener, error) { return ListenInNetns(nsPath, addr) },
		udp: func(addr string) (net.PacketConn, error) { return listenPacketInNetns(nsPath, addr) },
	}
}

// NetnsGate serves transparent egress for the sandbox whose network namespace ns
// opens sockets in, through a gate run by the caller (`oz0-node exec`): for a
// proxy that is not the caller's own and so cannot be told the namespace (it
// decides; the gate relays). The caller closes ns after the gate.
func NetnsGate(ns *Netns, socket string, resolver netip.Addr) (*Gate, error) {
	g := &Gate{Socket: socket, Resolver: resolver, Listen: ns.Listen, ListenPacket: ns.ListenPacket}
	if err := g.Start(); err != nil {
		return nil, err
	}
	return g, nil
}
