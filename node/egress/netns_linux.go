package egress

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ListenInNetns opens a TCP listener inside the network namespace at nsPath (a
// sandbox's /proc/PID/ns/net), for Listen.Listener: the tool then reaches the proxy
// on its own loopback with no bridge hop. It needs CAP_SYS_ADMIN over that
// namespace (a root node; bwrap sandboxes only — gVisor's loopback lives in its own
// network stack, where only the bridge reaches).
func ListenInNetns(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread switches namespace; it is handed back to the scheduler only if
		// it is switched back, otherwise it ends with this goroutine.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("listen in %s: own namespace: %w", nsPath, err)}
			return
		}
		defer home.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("listen in %s: %w", nsPath, err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("listen in %s: setns: %w", nsPath, err)}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			ch <- result{err: fmt.Errorf("listen in %s: return to own namespace: %w", nsPath, err)}
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		if lerr != nil {
			lerr = fmt.Errorf("listen in %s on %s: %w", nsPath, addr, lerr)
		}
		ch <- result{ln, lerr}
	}()
	r := <-ch
	return r.ln, r.err
}
