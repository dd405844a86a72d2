package egress

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/reexec"
)

// nsOpenHelper is the reexec name of the socket opener a non-root node starts in
// a sandbox's network namespace.
const nsOpenHelper = "netns-open"

func init() { reexec.Register(nsOpenHelper, nsOpenMain) }

// Netns opens sockets inside one sandbox's network namespace, for the proxy's
// listener there and transparent egress. A root node switches a locked thread into
// the namespace (ListenInNetns). A non-root node cannot: a Go process is
// multi-threaded and so cannot join the user namespace that owns the sandbox's
// network namespace. It starts one small helper instead, nsenter running the node
// binary in that user and network namespace, which opens each socket the node asks
// for and sends it back; the node accepts and reads on it, the helper never does.
// The helper stays in the node's pid and mount namespaces, out of the sandbox's
// sight, and ends with Close or the node.
type Netns struct {
	path string
	h    *nsHelper // nil when the node switches namespaces itself
}

// OpenNetns prepares to open sockets in the network namespace at nsPath
// (/proc/PID/ns/net of a sandbox's first process). Close it when the sandbox ends.
func OpenNetns(nsPath string) (*Netns, error) {
	if os.Geteuid() == 0 {
		return &Netns{path: nsPath}, nil
	}
	h, err := startNsHelper(nsPath)
	if err != nil {
		return nil, err
	}
	return &Netns{path: nsPath, h: h}, nil
}

// Listen opens a TCP listener on addr in the namespace.
func (n *Netns) Listen(addr string) (net.Listener, error) {
	if n.h == nil {
		return ListenInNetns(n.path, addr)
	}
	f, err := n.h.open("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen in %s on %s: %w", n.path, addr, err)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen in %s on %s: %w", n.path, addr, err)
	}
	return ln, nil
}

// ListenPacket opens a UDP socket on addr in the namespace.
func (n *Netns) ListenPacket(addr string) (net.PacketConn, error) {
	if n.h == nil {
		return listenPacketInNetns(n.path, addr)
	}
	f, err := n.h.open("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen in %s on udp %s: %w", n.path, addr, err)
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("listen in %s on udp %s: %w", n.path, addr, err)
	}
	return pc, nil
}

// Close ends the helper, if any; sockets already opened stay open.
func (n *Netns) Close() error {
	if n == nil || n.h == nil {
		return nil
	}
	return n.h.close()
}

// opener is n as the transparent resolver's socket opener.
func (n *Netns) opener() netnsOpener {
	return netnsOpener{tcp: n.Listen, udp: n.ListenPacket}
}

// ErrNoNsenter: a non-root node needs nsenter (util-linux) to open sockets in a
// sandbox's network namespace.
var ErrNoNsenter = errors.New("nsenter (util-linux) not found: a non-root node cannot serve transparent egress in a bwrap sandbox")

// NsenterAvailable reports whether a non-root node can open sockets in sandboxes'
// network namespaces.
func NsenterAvailable() bool {
	_, err := exec.LookPath("nsenter")
	return err == nil
}

// nsHelper is one running socket opener.
type nsHelper struct {
	mu   sync.Mutex
	conn *os.File // the node's end of the socketpair
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

// startNsHelper starts the opener for the network namespace at nsPath: nsenter
// joins the user namespace that owns it (the sandbox's outer one, which the node's
// user owns, so no privilege is needed) and then it, and executes the node binary as
// the helper with one end of a socketpair.
func startNsHelper(nsPath string) (*nsHelper, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, ErrNoNsenter
	}
	if err := waitUIDMap(nsPath); err != nil {
		return nil, err
	}
	self, err := reexec.Self()
	if err != nil {
		return nil, err
	}
	netns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("netns opener: %w", err)
	}
	defer netns.Close()
	ufd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return nil, fmt.Errorf("netns opener: the user namespace owning %s: %w", nsPath, err)
	}
	userns := os.NewFile(uintptr(ufd), "userns")
	defer userns.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns opener: socketpair: %w", err)
	}
	// The node's end is non-blocking, so its reads wait in the poller and honour
	// deadlines; the helper's stays blocking.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("netns opener: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "netns-opener"), os.NewFile(uintptr(fds[1]), "netns-opener")
	defer theirs.Close()
	// nsenter cannot set argv[0] apart from the name it executes, and the helper is
	// chosen by argv[0] alone: a private folder holds a link named as the helper,
	// found through PATH, and goes once the helper has started.
	dir, err := os.MkdirTemp("", "oz0-netns-")
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("netns opener: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(self, filepath.Join(dir, reexec.Argv0(nsOpenHelper))); err != nil {
		mine.Close()
		return nil, fmt.Errorf("netns opener: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(nsenter, "--user=/proc/self/fd/4", "--net=/proc/self/fd/5", "--preserve-credentials",
		"--", reexec.Argv0(nsOpenHelper), strconv.Itoa(os.Getpid()))
	cmd.Env = []string{"PATH=" + dir}
	cmd.ExtraFiles = []*os.File{theirs, userns, netns} // 3, 4, 5
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	theirs.Close() // the helper holds the only other end: its exit reads as end of file
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("netns opener: start nsenter: %w", err)
	}
	h := &nsHelper{conn: mine, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(h.done) }()
	// The helper says it runs before the link goes; a failed nsenter closes the pair.
	mine.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 128)
	n, rerr := mine.Read(buf)
	mine.SetReadDeadline(time.Time{})
	if rerr != nil || string(buf[:n]) != "ready" {
		h.close()
		msg := strings.TrimSpace(stderr.String())
		if rerr == nil {
			msg = string(buf[:n])
		} else if msg == "" {
			msg = rerr.Error()
		}
		return nil, fmt.Errorf("netns opener for %s did not start: %s", nsPath, msg)
	}
	return h, nil
}

// waitUIDMap waits until the sandbox's first process has mapped its user
// namespace: unprivileged bwrap reports the pid before its child writes the map,
// and a process entering the namespace before then is nobody there, without the
// capabilities to bind the resolver's port. /proc/PID/uid_map shows the map of the
// namespace PID is in now; it moves on to its nested one only after mapping the
// first, so a non-empty map means the first is mapped.
func waitUIDMap(nsPath string) error {
	dir := filepath.Dir(nsPath)
	if filepath.Base(nsPath) != "net" || filepath.Base(dir) != "ns" {
		return nil // not a /proc/PID/ns/net path: nothing to wait for
	}
	m := filepath.Join(filepath.Dir(dir), "uid_map")
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, err := os.ReadFile(m)
		if err != nil {
			return fmt.Errorf("netns opener: %w", err)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns opener: %s stayed empty: the sandbox never mapped its user namespace", m)
		}
		time.Sleep(time.Millisecond)
	}
}

// open asks the helper for a socket; it returns the socket as a file.
func (h *nsHelper) open(network, addr string) (*os.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rc, err := h.conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		werr = unix.Sendmsg(int(fd), []byte(network+" "+addr), nil, nil, 0)
		return werr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, fmt.Errorf("netns opener: %w", werr)
	}
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, fmt.Errorf("netns opener: %w", rerr)
	}
	if n == 0 && oobn == 0 {
		return nil, errors.New("netns opener: ended")
	}
	var fd = -1
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil && len(msgs) == 1 {
			if got, err := unix.ParseUnixRights(&msgs[0]); err == nil {
				for i, f := range got {
					if i == 0 {
						fd = f
					} else {
						unix.Close(f)
					}
				}
			}
		}
	}
	reply := string(buf[:n])
	if reply != "ok" || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, errors.New(strings.TrimPrefix(reply, "error "))
	}
	return os.NewFile(uintptr(fd), network+" "+addr), nil
}

// close ends the helper: it exits when its end of the pair reads end of file.
func (h *nsHelper) close() error {
	h.once.Do(func() {
		h.conn.Close()
		select {
		case <-h.done:
		case <-time.After(2 * time.Second):
			h.cmd.Process.Kill()
			<-h.done
		}
	})
	return nil
}

// nsOpenMain is the helper: on fd 3 it reads "tcp ADDR" or "udp ADDR", opens
// that socket in its (the sandbox's) network namespace and sends it back, until
// the node closes its end. It neither accepts nor reads on what it opens.
func nsOpenMain(args []string) int {
	// fds 4 and 5 were only for nsenter.
	unix.Close(4)
	unix.Close(5)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return 1
	}
	if len(args) != 1 || strconv.Itoa(os.Getppid()) != args[0] {
		return 1 // the node is already gone
	}
	conn := 3
	// Unmapped in the sandbox's user namespace, it would have no capability there
	// (nor bind the resolver's port 53): say so rather than fail socket by socket.
	if uid := os.Geteuid(); uid != 0 {
		unix.Sendmsg(conn, []byte(fmt.Sprintf("uid %d, not 0, in the sandbox's user namespace", uid)), nil, nil, 0)
		return 1
	}
	if err := unix.Sendmsg(conn, []byte("ready"), nil, nil, 0); err != nil {
		return 1
	}
	buf := make([]byte, 512)
	for {
		n, _, _, _, err := unix.Recvmsg(conn, buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0
		}
		network, addr, _ := strings.Cut(string(buf[:n]), " ")
		f, err := nsOpen(network, addr)
		if err != nil {
			if unix.Sendmsg(conn, []byte("error "+err.Error()), nil, nil, 0) != nil {
				return 0
			}
			continue
		}
		err = unix.Sendmsg(conn, []byte("ok"), unix.UnixRights(int(f.Fd())), nil, 0)
		f.Close()
		if err != nil {
			return 0
		}
	}
}

// nsOpen opens one socket and returns it as a file (a duplicate; the socket's
// own copy is closed here).
func nsOpen(network, addr string) (*os.File, error) {
	switch network {
	case "tcp":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		return ln.(*net.TCPListener).File()
	case "udp":
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		return pc.(*net.UDPConn).File()
	}
	return nil, fmt.Errorf("unknown network %q", network)
}
