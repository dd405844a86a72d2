package backendlinux

import (
	"encoding/binary"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// seccompData is struct seccomp_data (nr, arch, instruction pointer, six arguments)
// laid out as a little-endian kernel does, for golang.org/x/net/bpf's interpreter,
// which reads every 32-bit word big-endian: each word is written big-endian at the
// offset the kernel puts it (an argument's low word first).
func seccompData(a uint32, nr int, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], uint32(nr))
	binary.BigEndian.PutUint32(b[4:], a)
	for i, v := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(v))
		binary.BigEndian.PutUint32(b[16+8*i+4:], uint32(v>>32))
	}
	return b
}

// The default filter the node ships, run in a BPF interpreter on the calls it must
// refuse and on look-alikes it must let through.
func TestSeccompFilterDecisions(t *testing.T) {
	a := arch.X86_64
	raw, err := SeccompBPF("amd64")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(shippedProgram(t, raw))
	if err != nil {
		t.Fatalf("the filter is not valid BPF: %v", err)
	}
	allow := int(seccomp.ActionAllow)
	errno := func(e int) int { return int(seccomp.ActionErrno) | e }
	nr := func(name string) int { return a.SyscallNames[name] }
	x86 := uint32(a.ID)
	for _, c := range []struct {
		what string
		data []byte
		want int
	}{
		{"read", seccompData(x86, nr("read"), 0, 0, 0), allow},
		{"ptrace", seccompData(x86, nr("ptrace"), 16, 1), errno(errEPERM)},
		{"bpf", seccompData(x86, nr("bpf")), errno(errEPERM)},
		{"io_uring_setup", seccompData(x86, nr("io_uring_setup"), 1), errno(errEPERM)},
		{"mount_setattr", seccompData(x86, nr("mount_setattr")), errno(errEPERM)},
		{"clone3 answers ENOSYS so glibc falls back to clone", seccompData(x86, nr("clone3")), errno(errENOSYS)},
		{"clone of a thread", seccompData(x86, nr("clone"), 0x3d0f00), allow},
		{"clone with CLONE_NEWUSER", seccompData(x86, nr("clone"), 0x10000000|17), errno(errEPERM)},
		{"clone with CLONE_NEWNS", seccompData(x86, nr("clone"), 0x20000|17), errno(errEPERM)},
		{"unshare(CLONE_FILES)", seccompData(x86, nr("unshare"), 0x400), allow},
		{"unshare(CLONE_NEWTIME)", seccompData(x86, nr("unshare"), 0x80), errno(errEPERM)},
		{"socket(AF_INET)", seccompData(x86, nr("socket"), afINET), allow},
		{"socket(AF_INET6)", seccompData(x86, nr("socket"), afINET6), allow},
		{"socket(AF_UNIX)", seccompData(x86, nr("socket"), afUNIX), allow},
		{"socket(AF_VSOCK)", seccompData(x86, nr("socket"), 40), errno(errEAFNOSUPPORT)},
		{"socket(AF_NETLINK)", seccompData(x86, nr("socket"), 16), errno(errEAFNOSUPPORT)},
		{"socket(AF_INET with high bits)", seccompData(x86, nr("socket"), 1<<32|afINET), errno(errEAFNOSUPPORT)},
		{"ioctl(TCGETS)", seccompData(x86, nr("ioctl"), 0, 0x5401), allow},
		{"ioctl(TIOCSTI)", seccompData(x86, nr("ioctl"), 0, ioctlTIOCSTI), errno(errEPERM)},
		{"ioctl(TIOCSTI with high bits, which the kernel ignores)", seccompData(x86, nr("ioctl"), 0, 0xdead<<32|ioctlTIOCSTI), errno(errEPERM)},
		{"ioctl(TIOCLINUX)", seccompData(x86, nr("ioctl"), 0, ioctlTIOCLINUX), errno(errEPERM)},
		{"a call through the i386 ABI", seccompData(uint32(arch.I386.ID), 26 /* i386 ptrace */), errno(errENOSYS)},
		{"a call through the x32 ABI", seccompData(x86, 0x40000000|101), errno(errENOSYS)},
	} {
		got, err := vm.Run(c.data)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got != c.want {
			t.Errorf("%s: filter answers %#x, want %#x", c.what, got, c.want)
		}
	}
}

// bwrap reads raw sock_filter entries: 8 bytes each.
func TestSeccompBPFIsRawSockFilter(t *testing.T) {
	raw, err := SeccompBPF("amd64")
	if err != nil {
		t.Fatal(err)
	}
	prog, _ := seccompFilter(arch.X86_64)
	if len(raw) != 8*len(prog) || len(raw) == 0 {
		t.Errorf("%d bytes for %d instructions", len(raw), len(prog))
	}
	if _, err := SeccompBPF("mips"); err == nil {
		t.Errorf("an unsupported architecture was accepted")
	}
}

// The Landlock tier's filters, run in a BPF interpreter: every variant keeps the
// default profile's refusals and adds its own (seccomp.go, landlockVariant), and
// lets through what a proxied TCP client and a tool in its own home need.
func TestLandlockSeccompFilterDecisions(t *testing.T) {
	a := arch.X86_64
	allow := int(seccomp.ActionAllow)
	errno := func(e int) int { return int(seccomp.ActionErrno) | e }
	nr := func(name string) int { return a.SyscallNames[name] }
	x86 := uint32(a.ID)
	const (
		sockDgram    = 2
		sockRaw      = 3
		sockSeqpkt   = 5
		sockNonblock = 0x800
		sockCloexec  = 0x80000
		ipprotoSCTP  = 132
		ipprotoMPTCP = 262
		ipprotoICMP  = 1
		msgNosignal  = 0x4000
	)
	for _, v := range landlockVariants {
		raw, err := LandlockSeccompBPF("amd64", v)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(shippedProgram(t, raw))
		if err != nil {
			t.Fatalf("%+v: the filter is not valid BPF: %v", v, err)
		}
		onlyProxy := func(refused int) int {
			if v.ProxyOnly {
				return refused
			}
			return allow
		}
		nodeUser := func(refused int) int {
			if v.NodeUser {
				return refused
			}
			return allow
		}
		for _, c := range []struct {
			what string
			data []byte
			want int
		}{
			// The default profile's refusals hold.
			{"ptrace", seccompData(x86, nr("ptrace"), 16, 1), errno(errEPERM)},
			{"clone with CLONE_NEWUSER", seccompData(x86, nr("clone"), 0x10000000|17), errno(errEPERM)},
			{"clone3", seccompData(x86, nr("clone3")), errno(errENOSYS)},
			{"socket(AF_VSOCK)", seccompData(x86, nr("socket"), 40), errno(errEAFNOSUPPORT)},
			{"ioctl(TIOCSTI)", seccompData(x86, nr("ioctl"), 0, ioctlTIOCSTI), errno(errEPERM)},
			{"a call through the i386 ABI", seccompData(uint32(arch.I386.ID), 26), errno(errENOSYS)},
			// What every Landlock variant adds.
			{"socket(AF_UNIX)", seccompData(x86, nr("socket"), afUNIX, 1), errno(errEAFNOSUPPORT)},
			{"socketpair(AF_UNIX)", seccompData(x86, nr("socketpair"), afUNIX, 1), allow},
			{"shmget", seccompData(x86, nr("shmget"), 0, 4096, 01000), errno(errEPERM)},
			{"semget", seccompData(x86, nr("semget")), errno(errEPERM)},
			{"msgget", seccompData(x86, nr("msgget")), errno(errEPERM)},
			{"mq_open", seccompData(x86, nr("mq_open")), errno(errEPERM)},
			// A TCP client, as the proxy variables make one.
			{"socket(AF_INET, SOCK_STREAM, 0)", seccompData(x86, nr("socket"), afINET, sockStream, 0), allow},
			{"socket(AF_INET6, SOCK_STREAM|NONBLOCK|CLOEXEC, TCP)", seccompData(x86, nr("socket"), afINET6, sockStream|sockNonblock|sockCloexec, ipprotoTCP), allow},
			{"connect", seccompData(x86, nr("connect"), 3, 0, 16), allow},
			{"sendto(MSG_NOSIGNAL)", seccompData(x86, nr("sendto"), 3, 0, 1, msgNosignal, 0, 0), allow},
			{"sendmsg", seccompData(x86, nr("sendmsg"), 3, 0, 0), allow},
			// What only the proxy-only variant refuses.
			{"socket(AF_INET, SOCK_DGRAM)", seccompData(x86, nr("socket"), afINET, sockDgram, 0), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET6, SOCK_DGRAM|CLOEXEC)", seccompData(x86, nr("socket"), afINET6, sockDgram|sockCloexec, 0), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET, SOCK_DGRAM, ICMP) (ping)", seccompData(x86, nr("socket"), afINET, sockDgram, ipprotoICMP), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET, SOCK_RAW)", seccompData(x86, nr("socket"), afINET, sockRaw, 1), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET, SOCK_SEQPACKET, SCTP)", seccompData(x86, nr("socket"), afINET, sockSeqpkt, ipprotoSCTP), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET, SOCK_STREAM, SCTP)", seccompData(x86, nr("socket"), afINET, sockStream, ipprotoSCTP), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET6, SOCK_STREAM, MPTCP)", seccompData(x86, nr("socket"), afINET6, sockStream, ipprotoMPTCP), onlyProxy(errno(errEACCES))},
			{"socket(AF_INET, SOCK_STREAM, TCP with high bits)", seccompData(x86, nr("socket"), afINET, sockStream, 1<<32|ipprotoTCP), onlyProxy(errno(errEACCES))},
			{"listen", seccompData(x86, nr("listen"), 3, 1), onlyProxy(errno(errEPERM))},
			{"sendto(MSG_FASTOPEN)", seccompData(x86, nr("sendto"), 3, 0, 1, msgFastOpen, 0, 16), onlyProxy(errno(errEPERM))},
			{"sendmsg(MSG_FASTOPEN)", seccompData(x86, nr("sendmsg"), 3, 0, msgFastOpen|msgNosignal), onlyProxy(errno(errEPERM))},
			{"sendmmsg(MSG_FASTOPEN)", seccompData(x86, nr("sendmmsg"), 3, 0, 1, msgFastOpen), onlyProxy(errno(errEPERM))},
			// What only the node-user variant refuses; fchmod of an open file stays.
			{"chmod", seccompData(x86, nr("chmod"), 0, 0o644), nodeUser(errno(errEPERM))},
			{"fchmodat", seccompData(x86, nr("fchmodat"), 0, 0, 0o644), nodeUser(errno(errEPERM))},
			{"fchmodat2", seccompData(x86, nr("fchmodat2"), 0, 0, 0o644, 0x1000), nodeUser(errno(errEPERM))},
			{"chown", seccompData(x86, nr("chown")), nodeUser(errno(errEPERM))},
			{"lchown", seccompData(x86, nr("lchown")), nodeUser(errno(errEPERM))},
			{"fchownat", seccompData(x86, nr("fchownat")), nodeUser(errno(errEPERM))},
			{"fchmod", seccompData(x86, nr("fchmod"), 3, 0o644), allow},
		} {
			got, err := vm.Run(c.data)
			if err != nil {
				t.Fatalf("%+v %s: %v", v, c.what, err)
			}
			if got != c.want {
				t.Errorf("%+v %s: filter answers %#x, want %#x", v, c.what, got, c.want)
			}
		}
	}
}
