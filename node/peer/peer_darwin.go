package peer

import "golang.org/x/sys/unix"

// fdPeerUID reads the connecting process's uid the kernel kept on the socket.
func fdPeerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
