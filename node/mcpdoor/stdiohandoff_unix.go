//go:build linux || darwin

package mcpdoor

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/peer"
)

// readFirst reads the first bytes a caller sent on the stdio endpoint and the
// descriptors sent with them (a bridge's handoff; none otherwise).
func readFirst(c net.Conn) (first []byte, fds []int, err error) {
	uc, ok := peer.Underlying(c).(*net.UnixConn)
	if !ok {
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		return buf[:n], nil, err
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if n > 0 {
		if t, ok := c.(interface{ touch() }); ok {
			t.touch()
		}
	}
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for i := range msgs {
				got, _ := unix.ParseUnixRights(&msgs[i])
				for _, fd := range got {
					unix.CloseOnExec(fd)
				}
				fds = append(fds, got...)
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			// More were sent than a bridge sends: none is used.
			closeFDs(fds)
			fds = nil
		}
	}
	return buf[:n], fds, err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// pipesOf makes the client's stdin and stdout (fds, as a bridge sent them)
// files the node's poller serves. Only pipes and sockets are taken: a terminal
// or a file is shared with others, and its mode is not the node's to change.
func pipesOf(fds []int) (in, out *os.File, err error) {
	if len(fds) != 2 {
		closeFDs(fds)
		return nil, nil, fmt.Errorf("handoff: %d descriptors, want 2", len(fds))
	}
	for _, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			closeFDs(fds)
			return nil, nil, fmt.Errorf("handoff: stat descriptor: %w", err)
		}
		if m := st.Mode & unix.S_IFMT; m != unix.S_IFIFO && m != unix.S_IFSOCK {
			closeFDs(fds)
			return nil, nil, fmt.Errorf("handoff: descriptor is neither a pipe nor a socket (mode %o)", st.Mode)
		}
	}
	for _, fd := range fds {
		// Non-blocking, so that os.NewFile gives it to the poller: a read in
		// wait costs no thread, and Close ends it. Set only once both are
		// taken: the mode is shared with the bridge, which relays on a refusal.
		if err := unix.SetNonblock(fd, true); err != nil {
			closeFDs(fds)
			return nil, nil, fmt.Errorf("handoff: non-blocking descriptor: %w", err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "mcp client stdin"), os.NewFile(uintptr(fds[1]), "mcp client stdout"), nil
}
