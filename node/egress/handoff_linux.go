package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// listenerFromFD checks that fd is a listening TCP socket bound to a loopback
// address and returns it as a listener (taking the descriptor).
func listenerFromFD(fd int) (net.Listener, error) {
	fail := func(why string) (net.Listener, error) {
		unix.Close(fd)
		return nil, errors.New(why)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fail("not a socket")
	}
	for _, c := range []struct {
		opt  int
		want int
		why  string
	}{
		{unix.SO_DOMAIN, unix.AF_INET, "not an IPv4 socket"},
		{unix.SO_TYPE, unix.SOCK_STREAM, "not a stream socket"},
		{unix.SO_ACCEPTCONN, 1, "not a listening socket"},
	} {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, c.opt); err != nil || v != c.want {
			return fail(c.why)
		}
	}
	// Go listens with multipath TCP where the kernel has it (it falls back to
	// plain TCP per connection): both are TCP here.
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || (v != unix.IPPROTO_TCP && v != unix.IPPROTO_MPTCP) {
		return fail("not a TCP socket")
	}
	sa, err := unix.Getsockname(fd)
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok || !netip.AddrFrom4(in4.Addr).IsLoopback() {
		return fail("not bound to a loopback address")
	}
	f := os.NewFile(uintptr(fd), "handed-off listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	return ln, nil
}

// handoffWait bounds how long a bridge waits for the proxy's answer before it
// relays by itself.
const handoffWait = 3 * time.Second

// HandOff passes ln (a listener the caller opened in its sandbox) to the proxy
// endpoint at sock. On success the proxy serves ln's connections and the returned
// connection must stay open for as long as it should; the caller may close its
// own ln. On failure the caller still has ln and should serve it itself.
func HandOff(ln *net.TCPListener, sock string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, err
	}
	raw, err := ln.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	var werr error
	err = raw.Control(func(fd uintptr) {
		_, _, werr = c.WriteMsgUnix([]byte(handoffMagic), unix.UnixRights(int(fd)), nil)
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("pass the listener: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(handoffWait))
	reply := make([]byte, 128)
	n, err := c.Read(reply)
	if err != nil && n == 0 {
		c.Close()
		return nil, fmt.Errorf("no answer to the handoff: %w", err)
	}
	if string(reply[:n]) != handoffReplyOK {
		c.Close()
		return nil, fmt.Errorf("the proxy answered %q", reply[:n])
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}
