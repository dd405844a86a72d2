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
