package backendlinux

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// runsc --network=none pins an empty network namespace for its gofers with a bind
// mount at <state>/null-netns, shared by every sandbox of that state folder and
// never removed: each data folder that ever ran gVisor would keep an nsfs mount
// (and could not be removed), and every bwrap start reads a longer mount table.
//
// Every process with a gVisor sandbox in a state folder (the node, exec, hook,
// plugin install's build sandbox, tests) holds a shared flock on a users' lock
// of its mount namespace from its first sandbox's start to its last one's
// cleanup. The last user unmounts: a process that ends its last sandbox takes the
// lock exclusively without waiting, which succeeds only when no other process has
// one, and unmounts then. A process that dies without cleaning up (SIGKILL) drops
// its lock with it, so the next first start in any process (and a node's start-up
// sweep) finds the lock free and a mount left: stale, swept. A running sandbox
// keeps its namespace whatever happens to the mount; one starting holds the lock,
// so its mount is never taken from under runsc. A second lock, the same in every
// mount namespace, keeps the start-up sweep off live processes' containers.
var nullNetns struct {
	sync.Mutex
	users map[string]*netnsUsers
}

type netnsUsers struct {
	n    int
	lock *os.File // this mount namespace's; nil when it could not be opened
	any  *os.File // every namespace's: containers live in the state folder
}

func holdNullNetns(state string) {
	nullNetns.Lock()
	defer nullNetns.Unlock()
	if nullNetns.users == nil {
		nullNetns.users = map[string]*netnsUsers{}
	}
	u := nullNetns.users[state]
	if u == nil {
		u = &netnsUsers{}
		nullNetns.users[state] = u
		f, err := openUsersLock(state)
		if err == nil {
			// Alone: what is mounted is a dead process's; sweep it first.
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				unmountNullNetns(state)
			}
			// Waits while another process's last user unmounts.
			unix.Flock(int(f.Fd()), unix.LOCK_SH)
			u.lock = f
		}
		if f, err := openAnyUsersLock(state); err == nil {
			unix.Flock(int(f.Fd()), unix.LOCK_SH)
			u.any = f
		}
	}
	u.n++
}

func releaseNullNetns(state string) {
	nullNetns.Lock()
	defer nullNetns.Unlock()
	u := nullNetns.users[state]
	if u == nil {
		return
	}
	u.n--
	if u.n > 0 {
		return
	}
	delete(nullNetns.users, state)
	if u.any != nil {
		u.any.Close()
	}
	if u.lock == nil {
		return
	}
	if unix.Flock(int(u.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		unmountNullNetns(state)
	}
	u.lock.Close()
}

// sweepNullNetns unmounts a state folder's null-netns mount when no process uses
// it (its users' lock is free). It reports whether it unmounted anything.
func sweepNullNetns(state string) bool {
	f, err := openUsersLock(state)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // a live sandbox of some process
	}
	return unmountNullNetns(state)
}

// openUsersLock opens (making it) the users' lock file beside a state folder,
// refusing a symlink in its place.
func openUsersLock(state string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(usersLockPath(state), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

// openAnyUsersLock opens the users' lock of every mount namespace.
func openAnyUsersLock(state string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(state+".users", os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

// usersLockPath names the lock per mount namespace: a mount is in one namespace
// only, so users of the same data folder from another one (a node started under
// unshare --mount beside an exec outside it) neither keep this one's mount nor
// unmount theirs.
func usersLockPath(state string) string {
	ns, err := os.Readlink("/proc/self/ns/mnt") // mnt:[4026531841]
	if i := strings.IndexByte(ns, '['); err == nil && i >= 0 && strings.HasSuffix(ns, "]") {
		return state + ".users-mnt" + ns[i+1:len(ns)-1]
	}
	return state + ".users-mnt"
}

// unmountNullNetns releases the empty network namespace runsc --network=none keeps
// mounted in its state folder, so the folder can be removed. Mounts stacked there
// (two runsc starts racing to pin it) are all released. The two last components
// of the state folder (run/runsc of a data folder) are resolved without following
// any symlink, and only an nsfs mount is unmounted: a link planted there cannot
// turn this into an unmount of something elsewhere.
func unmountNullNetns(state string) bool {
	parent := filepath.Dir(filepath.Dir(state))
	rel := filepath.Join(filepath.Base(filepath.Dir(state)), filepath.Base(state))
	root, err := os.Open(parent)
	if err != nil {
		return false
	}
	defer root.Close()
	fd, err := unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return unmountNullNetnsOld(state)
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	// The fd's magic link names the folder opened above, not what its path names now.
	p := "/proc/self/fd/" + strconv.Itoa(fd) + "/null-netns"
	done := false
	for range 16 {
		if !isNsfsFile(fd) {
			break
		}
		if unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) != nil {
			break
		}
		done = true
	}
	return done
}

// isNsfsFile says whether null-netns in the folder fd is a file (not a link) on nsfs.
func isNsfsFile(dir int) bool {
	var st unix.Stat_t
	if unix.Fstatat(dir, "null-netns", &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	f, err := unix.Openat(dir, "null-netns", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(f)
	var fs unix.Statfs_t
	return unix.Fstatfs(f, &fs) == nil && fs.Type == unix.NSFS_MAGIC
}

// unmountNullNetnsOld is for kernels without openat2 (before 5.6): no component
// of the path may be a symlink.
func unmountNullNetnsOld(state string) bool {
	for d := state; d != filepath.Dir(d); d = filepath.Dir(d) {
		if fi, err := os.Lstat(d); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return false
		}
	}
	dir, err := unix.Open(state, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dir)
	done := false
	for range 16 {
		if !isNsfsFile(dir) || unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) != nil {
			break
		}
		done = true
	}
	return done
}
