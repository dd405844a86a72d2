package backendlinux

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"oz0.ai/node/node/sandbox"
)

// Errno values the filter answers with. They are the Linux numbers on every
// architecture the node supports, spelled out so this file builds on any OS.
const (
	errEPERM        = 1
	errEACCES       = 13
	errENOSYS       = 38
	errEAFNOSUPPORT = 97
)

// Socket families a sandbox may open: everything else (AF_VSOCK reaching the VM host,
// AF_NETLINK, AF_PACKET, AF_BLUETOOTH, …) is refused.
const (
	afUNIX  = 1
	afINET  = 2
	afINET6 = 10
)

// Namespace flags of clone(2) and unshare(2). CLONE_NEWTIME (0x80) overlaps the exit
// signal byte of clone(2), so it is only checked for unshare.
const (
	cloneNamespaces   = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
	unshareNamespaces = cloneNamespaces | 0x00000080
)

// Terminal ioctls that inject input or reach the console.
const (
	ioctlTIOCSTI   = 0x5412
	ioctlTIOCLINUX = 0x541C
)

// deniedSyscalls answer EPERM in every sandbox: debugging other processes, kernel
// keyrings, io_uring, perf and bpf, userfaultfd, every mount API, namespace
// switching, kernel images and modules, and a few host-wide administration calls.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"perf_event_open", "bpf", "userfaultfd",
	"mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"setns",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "iopl", "ioperm", "vhangup",
}

// The Landlock tier has no namespace of its own, and Landlock (up to the ABI the
// node knows) does not confine everything a namespace would have hidden: its
// profile is the default one plus the rules below (docs/promises.md §2, the
// Landlock tier).
//
// ipcSyscalls are System V IPC and POSIX message queues: without an IPC namespace
// they would reach the objects of the tool's user on the host.
var ipcSyscalls = []string{
	"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
	"msgget", "msgsnd", "msgrcv", "msgctl",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
}

// ownerByPath change a file's mode or owner by its path, which Landlock does not
// confine: a tool running as the node's own user (a non-root node) could loosen
// the modes of the node's key and data folder. fchmod on a file the tool opened
// (within its rights) stays allowed.
var ownerByPath = []string{"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat"}

// Socket constants the Landlock tier's network rules test.
const (
	sockStream   = 1
	sockTypeHigh = 0xe // type bits besides SOCK_STREAM's within SOCK_TYPE_MASK (0xf)
	ipprotoTCP   = 6
	msgFastOpen  = 0x20000000
)

// landlockVariant selects one of the Landlock tier's assembled filters.
type landlockVariant struct {
	// ProxyOnly: the sandbox reaches only the proxy (strict). Landlock confines
	// TCP connect and bind by port, nothing else: the filter refuses every other
	// socket type and protocol (UDP, ICMP, SCTP, MPTCP), listen (which binds an
	// ephemeral port unchecked) and MSG_FASTOPEN (a connect Landlock does not see).
	ProxyOnly bool
	// NodeUser: the tool runs as the node's own user, whose files it could
	// otherwise re-mode by path (ownerByPath).
	NodeUser bool
}

func (v landlockVariant) index() int {
	i := 0
	if v.ProxyOnly {
		i |= 1
	}
	if v.NodeUser {
		i |= 2
	}
	return i
}

// LandlockSeccompBPF is the Landlock tier's profile for a variant, as the raw
// sock_filter array the runner loads (assembled ahead of time like SeccompBPF's).
func LandlockSeccompBPF(goarch string, v landlockVariant) ([]byte, error) {
	a, err := archFor(goarch)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), a.landlock[v.index()]...), nil
}

// checkSeccompProfile fails closed on a profile name this node does not have.
func checkSeccompProfile(s *sandbox.Spec) error {
	if s.Seccomp != "" && s.Seccomp != "default" {
		return fmt.Errorf("plugin %s: seccomp profile %q is not known (only \"default\")", s.Plugin, s.Seccomp)
	}
	return nil
}

// SeccompBPF is the default profile as the raw sock_filter array bwrap reads from
// --seccomp FD (8 bytes per instruction, native byte order). The filters are
// assembled ahead of time (seccomp_filters.go, written by
// `go test ./backend_linux -run TestSeccompFiltersGenerated -update` from the
// policy in seccomp_assemble_test.go), so no start pays for assembling them and the
// node links no seccomp assembler.
func SeccompBPF(goarch string) ([]byte, error) {
	a, err := archFor(goarch)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), a.filter...), nil
}

// seccompArch is what the profile needs of one architecture.
type seccompArch struct {
	oci    specs.Arch
	filter []byte   // the assembled default profile
	denied []string // deniedSyscalls that exist on it (iopl/ioperm are x86 only)
	// landlock are the Landlock tier's profiles, by landlockVariant.index.
	landlock [4][]byte
}

func archFor(goarch string) (*seccompArch, error) {
	switch goarch {
	case "amd64":
		return &seccompArch{oci: specs.ArchX86_64, filter: seccompFilterAMD64, denied: seccompDeniedAMD64, landlock: seccompLandlockAMD64}, nil
	case "arm64":
		return &seccompArch{oci: specs.ArchAARCH64, filter: seccompFilterARM64, denied: seccompDeniedARM64, landlock: seccompLandlockARM64}, nil
	}
	return nil, fmt.Errorf("seccomp: architecture %s is not supported", goarch)
}

// ociSeccomp is the same profile in the OCI form runsc enforces itself.
func ociSeccomp(goarch string) (*specs.LinuxSeccomp, error) {
	a, err := archFor(goarch)
	if err != nil {
		return nil, err
	}
	errno := func(n uint) *uint { return &n }
	names := append([]string(nil), a.denied...)
	// No clone3 rule here: runsc answers every OCI errno rule with EPERM (it ignores
	// errnoRet), and glibc falls back to clone(2) only on ENOSYS, so denying clone3
	// would break every thread. Namespaces made inside gVisor are the sentry's own.
	rules := []specs.LinuxSyscall{
		{Names: names, Action: specs.ActErrno, ErrnoRet: errno(errEPERM)},
	}
	// Socket families other than UNIX, INET and INET6: runsc reads several
	// conditions on one argument as one, so each range gets a rule of its own.
	rules = append(rules, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: errno(errEAFNOSUPPORT),
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: afINET6 + 1, Op: specs.OpGreaterEqual}}})
	for fam := uint64(0); fam < afINET6; fam++ {
		if fam != afUNIX && fam != afINET {
			rules = append(rules, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: errno(errEAFNOSUPPORT),
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: fam, Op: specs.OpEqualTo}}})
		}
	}
	// OCI rules cannot say "any of these bits": one rule per namespace flag.
	for _, sc := range []struct {
		name  string
		flags uint64
	}{{"clone", cloneNamespaces}, {"unshare", unshareNamespaces}} {
		for bit := uint64(1); bit < 1<<32; bit <<= 1 {
			if sc.flags&bit != 0 {
				rules = append(rules, specs.LinuxSyscall{Names: []string{sc.name}, Action: specs.ActErrno, ErrnoRet: errno(errEPERM),
					Args: []specs.LinuxSeccompArg{{Index: 0, Value: bit, ValueTwo: bit, Op: specs.OpMaskedEqual}}})
			}
		}
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{a.oci},
		Syscalls: append(rules, []specs.LinuxSyscall{
			{Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: errno(errEPERM),
				Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: ioctlTIOCSTI, Op: specs.OpMaskedEqual}}},
			{Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: errno(errEPERM),
				Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: ioctlTIOCLINUX, Op: specs.OpMaskedEqual}}},
		}...),
	}, nil
}
