package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// fdPeerCred reads the connecting process's uid and pid the kernel kept on a
// unix socket.
func fdPeerCred(fd int) (uid, pid int, err error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1, -1, err
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// tcpPeerUID is the user owning the other end of a loopback TCP connection: its
// socket is on this host, and the kernel's socket diagnostics (the netlink
// interface ss reads) find it by its four-tuple. On loopback every peer has the
// same address, so the user is what tells one local client from another.
func tcpPeerUID(c *net.TCPConn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, errors.New("not a TCP connection")
	}
	la, _ := netip.AddrFromSlice(local.IP)
	ra, _ := netip.AddrFromSlice(remote.IP)
	la, ra = la.Unmap(), ra.Unmap()
	family := uint8(unix.AF_INET)
	if ra.Is6() {
		family = unix.AF_INET6
		la = netip.AddrFrom16(la.As16())
	}
	// The peer's socket: its source is the remote end of ours.
	req := make([]byte, 16+56)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	r := req[16:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff) // any state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(remote.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(local.Port))
	copy(id[4:20], ra.AsSlice())
	copy(id[20:36], la.AsSlice())
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // no cookie
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Usec: 200_000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	if n < 16 {
		return -1, errors.New("sock_diag: short answer")
	}
	switch typ := binary.NativeEndian.Uint16(buf[4:]); typ {
	case unix.SOCK_DIAG_BY_FAMILY:
		// inet_diag_msg: family, state, timer, retrans, the socket id (48 bytes),
		// expires, rqueue, wqueue, then the uid.
		if n < 16+68 {
			return -1, errors.New("sock_diag: short message")
		}
		return int(binary.NativeEndian.Uint32(buf[16+64:])), nil
	case unix.NLMSG_ERROR:
		return -1, fmt.Errorf("sock_diag: the peer's socket was not found (errno %d)", -int32(binary.NativeEndian.Uint32(buf[16:])))
	default:
		return -1, fmt.Errorf("sock_diag: answer of type %d", typ)
	}
}

// Who says who is at the other end of c: peer is the user (a unix socket's
// credentials, a loopback TCP peer's socket owner; else its address), client the
// process where the kernel says which (a unix socket), else the peer.
func Who(c net.Conn) (peer, client string) {
	switch cc := Underlying(c).(type) {
	case *net.UnixConn:
		raw, err := cc.SyscallConn()
		if err != nil {
			return "unix", "unix"
		}
		uid, pid := -1, -1
		raw.Control(func(fd uintptr) { uid, pid, _ = fdPeerCred(int(fd)) })
		peer = "uid " + strconv.Itoa(uid)
		return peer, peer + " pid " + strconv.Itoa(pid)
	case *net.TCPConn:
		if uid, err := tcpPeerUID(cc); err == nil {
			peer = "uid " + strconv.Itoa(uid)
			return peer, peer
		}
		if a, ok := cc.RemoteAddr().(*net.TCPAddr); ok {
			return "address " + a.IP.String(), "address " + a.IP.String()
		}
	}
	return "unknown", "unknown"
}
