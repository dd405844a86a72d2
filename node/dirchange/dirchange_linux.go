package dirchange

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch is an inotify instance over the folders added to it. Its generation
// changes whenever one of them changed: an entry created, removed, renamed,
// written or its attributes changed, or the folder itself removed or renamed
// (its path may now name another folder).
type Watch struct {
	fd int
	// stop ends the goroutine that follows the mount table (a folder mounted
	// over is not an event of the folder); its other end is closed with it.
	stop, stopped int
	done          chan struct{}
	// gen is odd while events are being drained: a reader that sees it odd,
	// or see it change around its look at the queue, waits for the drain.
	gen atomic.Uint64

	mu     sync.Mutex // drains and adds
	byPath map[string]int32
	byWD   map[int32]string
	buf    []byte
}

// Entry events: what changes a folder's contents or the files in it. Self
// events: the folder itself gone or moved, so its path no longer names it.
const (
	entryEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
		unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB
	selfEvents = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
)

// localFS are the file systems whose every change passes through this kernel
// (and so through inotify): on a network or FUSE file system another machine or
// process may change a file unheard of.
var localFS = map[int64]string{
	unix.EXT4_SUPER_MAGIC:      "ext4", // also ext2 and ext3
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay",
}

// New starts an empty watch.
func New() (*Watch, error) {
	// A plain descriptor, not an os.File: the runtime's poller would take the
	// table's change (a poll of it consumes it) before followMounts sees it.
	mounts, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("follow the mount table: %w", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		unix.Close(mounts)
		return nil, fmt.Errorf("follow the mount table: %w", err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		unix.Close(mounts)
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watch{fd: fd, stop: p[1], stopped: p[0], done: make(chan struct{}),
		byPath: map[string]int32{}, byWD: map[int32]string{}, buf: make([]byte, 16<<10)}
	go w.followMounts(mounts)
	return w, nil
}

// followMounts forgets every watch when the mount table changes: a file system
// mounted over a folder (or one of its parents) makes its path name another
// folder, with no event of the one watched. The table's change is seen as
// soon as this goroutine wakes, not within the call that made it, as a file's
// change is.
func (w *Watch) followMounts(mounts int) {
	defer close(w.done)
	defer unix.Close(mounts)
	fds := []unix.PollFd{{Fd: int32(mounts), Events: unix.POLLPRI}, {Fd: int32(w.stopped), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
			w.mu.Lock()
			w.gen.Add(1)
			w.forgetAll()
			w.gen.Add(1)
			w.mu.Unlock()
		}
	}
}

// Add watches folders, their entries and files, and parents for their own
// removal or renaming only (the parents of the folders that matter, whose
// other entries change too often to be of use). A folder already watched is
// left as it is. A caller adds the folders before it reads Gen and then its
// inputs: what changes after Add is seen.
//
// A folder watched anew moves the generation on: it may have been forgotten
// (the mount table changed) between a caller's Add and its Gen, and changed
// unheard of since; the generation that caller kept must not match again.
func (w *Watch) Add(parents, folders []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	added := false
	defer func() {
		if added {
			w.gen.Add(2) // even stays even: no drain is under way, it holds mu
		}
	}()
	for i, dirs := range [][]string{parents, folders} {
		for _, dir := range dirs {
			if _, ok := w.byPath[dir]; !ok {
				if err := w.add(dir, i == 1); err != nil {
					return err
				}
				added = true
			}
		}
	}
	return nil
}

func (w *Watch) add(dir string, entries bool) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	if _, ok := localFS[int64(fs.Type)]; !ok {
		return fmt.Errorf("watch %s: file system 0x%x: %w", dir, fs.Type, ErrUnsupported)
	}
	// Two paths to one folder share a watch, whose events the second adds to
	// the first's (IN_MASK_ADD) rather than replacing them.
	mask := uint32(selfEvents | unix.IN_MASK_ADD)
	if entries {
		mask |= entryEvents
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, mask)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.byPath[dir] = int32(wd)
	w.byWD[int32(wd)] = dir
	return nil
}

// Gen returns the watch's generation: the same number twice means nothing in
// the folders watched changed between the two calls. It reports false when the
// watch cannot tell (its queue cannot be read), and the caller reads its inputs.
func (w *Watch) Gen() (uint64, bool) {
	if w == nil {
		return 0, false
	}
	for range 3 {
		g := w.gen.Load()
		if g%2 == 0 {
			// FIONREAD, the bytes queued, is TIOCINQ on Linux.
			n, err := unix.IoctlGetInt(w.fd, unix.TIOCINQ)
			if err != nil {
				return 0, false
			}
			if n == 0 && w.gen.Load() == g {
				return g, true
			}
		}
		w.drain()
	}
	return 0, false
}

// drain reads every queued event, its generation odd meanwhile and moved on
// twice: an event that arrived during the drain is counted as well. A folder
// removed or renamed is forgotten (its watch too), to be added again by path.
func (w *Watch) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen.Add(1)
	defer w.gen.Add(1)
	for {
		n, err := unix.Read(w.fd, w.buf)
		if n <= 0 || err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				// Events were lost, among them perhaps a folder's removal:
				// start again with no watch.
				w.forgetAll()
			case ev.Mask&unix.IN_IGNORED != 0:
				w.forget(ev.Wd)
			case ev.Mask&unix.IN_MOVE_SELF != 0:
				unix.InotifyRmWatch(w.fd, uint32(ev.Wd))
				w.forget(ev.Wd)
			}
		}
	}
}

func (w *Watch) forgetAll() {
	for wd := range w.byWD {
		unix.InotifyRmWatch(w.fd, uint32(wd))
	}
	clear(w.byPath)
	clear(w.byWD)
}

func (w *Watch) forget(wd int32) {
	for p, d := range w.byPath {
		if d == wd {
			delete(w.byPath, p)
		}
	}
	delete(w.byWD, wd)
}

// Close ends the watch.
func (w *Watch) Close() error {
	if w == nil {
		return nil
	}
	unix.Close(w.stop)
	<-w.done
	unix.Close(w.stopped)
	return unix.Close(w.fd)
}
