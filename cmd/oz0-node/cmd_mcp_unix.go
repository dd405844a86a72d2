//go:build linux || darwin

package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/mcpdoor"
)

// handOffWait bounds the wait for the node's answer to a handoff: a node that
// does not know it answers at once (an error: no such method). One silent this
// long is given up on (the connection closed, which ends a session it might yet
// start on the pipes) and the bridge relays instead.
const handOffWait = 30 * time.Second

// handOff sends the bridge's stdin and stdout to the node over conn and, once
// the node holds them, waits for the session's end: handed is false (and conn
// unusable for a session) when the node did not take them, and the bridge
// relays instead. Only pipes and sockets are handed: a terminal or a file is
// not the node's to read.
func handOff(ctx context.Context, conn *net.UnixConn, agentHooks bool) (handed bool, err error) {
	if !pipeOrSocket(0) || !pipeOrSocket(1) {
		return false, nil
	}
	req := mcpdoor.HandoffRequest
	if agentHooks {
		req = mcpdoor.HandoffRequestAgentHooks
	}
	if _, _, err := conn.WriteMsgUnix([]byte(req+"\n"), unix.UnixRights(0, 1), nil); err != nil {
		return false, nil
	}
	r := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(handOffWait))
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != mcpdoor.HandoffAccepted {
		// The node may have made the pipes non-blocking before it gave up on
		// them; the relay reads and writes them blocking.
		unix.SetNonblock(0, false)
		unix.SetNonblock(1, false)
		return false, nil
	}
	conn.SetReadDeadline(time.Time{})
	// The node holds the pipes; the bridge's own copies go, so that the
	// client's end of input and output is the node's doing alone.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		unix.Dup2(int(null.Fd()), 0)
		unix.Dup2(int(null.Fd()), 1)
		null.Close()
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	line, _ = r.ReadString('\n')
	switch {
	case ctx.Err() != nil:
		return true, nil
	case strings.TrimSpace(line) == mcpdoor.HandoffEnded:
		return true, nil
	default:
		return true, errNodeEnded
	}
}

// pipeOrSocket reports whether fd is a pipe or a socket.
func pipeOrSocket(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return false
	}
	m := st.Mode & unix.S_IFMT
	return m == unix.S_IFIFO || m == unix.S_IFSOCK
}

// blockingConn is conn as a blocking descriptor: the relay's two copies each
// wait in their own read, with no poller in between.
func blockingConn(conn *net.UnixConn) nodeConn {
	raw, err := conn.SyscallConn()
	if err != nil {
		return conn
	}
	fd := -1
	if err := raw.Control(func(s uintptr) { fd, _ = unix.Dup(int(s)) }); err != nil || fd < 0 {
		return conn
	}
	// The mode belongs to the socket both descriptors share; conn is done with.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return conn
	}
	unix.CloseOnExec(fd)
	conn.Close()
	return &blockingSock{File: os.NewFile(uintptr(fd), "node socket"), fd: fd}
}

// blockingSock is the node's socket read and written with blocking calls.
type blockingSock struct {
	*os.File
	fd   int
	once sync.Once
	err  error
}

func (s *blockingSock) CloseWrite() error { return unix.Shutdown(s.fd, unix.SHUT_WR) }

func (s *blockingSock) Close() error {
	s.once.Do(func() {
		unix.Shutdown(s.fd, unix.SHUT_RDWR) // ends the other copy's read in wait
		s.err = s.File.Close()
	})
	return s.err
}
