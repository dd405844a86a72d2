package backendlinux

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"

	"oz0.ai/node/node/sandbox"
)

// Errno values the filter answers with. They are the Linux numbers on every
// architecture the node supports, spelled out so this file builds on any OS.
const (
	errEPERM        = 1
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

// checkSeccompProfile fails closed on a profile name this node does not have.
func checkSeccompProfile(s *sandbox.Spec) error {
	if s.Seccomp != "" && s.Seccomp != "default" {
		return fmt.Errorf("plugin %s: seccomp profile %q is not known (only \"default\")", s.Plugin, s.Seccomp)
	}
	return nil
}

// seccompPolicy is the default profile as a go-seccomp-bpf policy. The TIOCSTI and
// TIOCLINUX checks are not in it: the kernel reads the ioctl request as 32 bits, so they
// must compare the low half only, which the library cannot express (see seccompFilter).
func seccompPolicy(a *arch.Info) seccomp.Policy {
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := a.SyscallNames[n]; ok { // iopl/ioperm exist on x86 only
			names = append(names, n)
		}
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno | errENOSYS, Names: []string{"clone3"}},
			{Action: seccomp.ActionErrno | errEPERM, Names: names},
			{Action: seccomp.ActionErrno | errEPERM, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaces}}},
				{Name: "unshare", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unshareNamespaces}}},
			}},
			// NotEqual compares all 64 bits, so garbage in the high half is refused too.
			{Action: seccomp.ActionErrno | errEAFNOSUPPORT, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "socket", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.NotEqual, Value: afUNIX},
					{Argument: 0, Operation: seccomp.NotEqual, Value: afINET},
					{Argument: 0, Operation: seccomp.NotEqual, Value: afINET6},
				}},
			}},
		},
	}
}

// seccompFilter assembles the default profile into classic BPF for an architecture
// (x86_64 or aarch64). A hand-written preamble comes first: it refuses every syscall
// made under another audit architecture (an x86_64 process can enter through the
// i386 ABI, which the library's filter would allow) and refuses the two terminal
// ioctls by the low 32 bits of their request.
func seccompFilter(a *arch.Info) ([]bpf.Instruction, error) {
	pol := seccompPolicy(a)
	body, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp policy for %s: %w", a.Name, err)
	}
	ioctl, ok := a.SyscallNames["ioctl"]
	if !ok {
		return nil, fmt.Errorf("seccomp: no ioctl on %s", a.Name)
	}
	const (
		offNr   = 0
		offArch = 4
		offArg1 = 16 + 8 // low half of args[1] on little-endian machines
	)
	pre := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | errENOSYS},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ioctl), SkipFalse: 4},
		bpf.LoadAbsolute{Off: offArg1, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioctlTIOCSTI, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioctlTIOCLINUX, SkipFalse: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | errEPERM},
	}
	return append(pre, body...), nil
}

// SeccompBPF is the default profile as the raw sock_filter array bwrap reads from
// --seccomp FD (8 bytes per instruction, native byte order).
func SeccompBPF(goarch string) ([]byte, error) {
	a, err := archFor(goarch)
	if err != nil {
		return nil, err
	}
	prog, err := seccompFilter(a)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

func archFor(goarch string) (*arch.Info, error) {
	switch goarch {
	case "amd64":
		return arch.X86_64, nil
	case "arm64":
		return arch.AARCH64, nil
	}
	return nil, fmt.Errorf("seccomp: architecture %s is not supported", goarch)
}

// ociSeccomp is the same profile in the OCI form runsc enforces itself.
func ociSeccomp(goarch string) (*specs.LinuxSeccomp, error) {
	a, err := archFor(goarch)
	if err != nil {
		return nil, err
	}
	ociArch := specs.ArchX86_64
	if a == arch.AARCH64 {
		ociArch = specs.ArchAARCH64
	}
	errno := func(n uint) *uint { return &n }
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := a.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
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
		Architectures: []specs.Arch{ociArch},
		Syscalls: append(rules, []specs.LinuxSyscall{
			{Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: errno(errEPERM),
				Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: ioctlTIOCSTI, Op: specs.OpMaskedEqual}}},
			{Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: errno(errEPERM),
				Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: ioctlTIOCLINUX, Op: specs.OpMaskedEqual}}},
		}...),
	}, nil
}
