package backendlinux

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"

	"oz0.ai/node/internal/golden"
)

// The default profile's policy and its assembly live here, beside the test that
// writes seccomp_filters.go: the node ships the assembled filters and links no
// assembler (the library's tables cost every start of the binary).

// seccompArchs are the architectures the node ships filters for.
var seccompArchs = []struct {
	goarch, suffix string
	info           *arch.Info
}{
	{"amd64", "AMD64", arch.X86_64},
	{"arm64", "ARM64", arch.AARCH64},
}

// deniedOn is deniedSyscalls that exist on an architecture.
func deniedOn(a *arch.Info) []string {
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := a.SyscallNames[n]; ok { // iopl/ioperm exist on x86 only
			names = append(names, n)
		}
	}
	return names
}

// seccompPolicy is the default profile as a go-seccomp-bpf policy. The TIOCSTI and
// TIOCLINUX checks are not in it: the kernel reads the ioctl request as 32 bits, so they
// must compare the low half only, which the library cannot express (see seccompFilter).
func seccompPolicy(a *arch.Info) seccomp.Policy {
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno | errENOSYS, Names: []string{"clone3"}},
			{Action: seccomp.ActionErrno | errEPERM, Names: deniedOn(a)},
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

// namesOn are the names that exist on an architecture.
func namesOn(a *arch.Info, names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := a.SyscallNames[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// landlockPolicies are the Landlock tier's profile: the default one and the rules
// for what Landlock leaves open (seccomp.go, landlockVariant), one conditional
// syscall per policy. go-seccomp-bpf leaves an argument in the accumulator when a
// syscall's conditions do not match and then compares it as the next syscall's
// number, so a later rule for another (or the same) syscall could be skipped;
// landlockFilter chains the policies, and each reloads the number.
func landlockPolicies(a *arch.Info, v landlockVariant) []seccomp.Policy {
	pols := []seccomp.Policy{seccompPolicy(a)}
	one := func(g ...seccomp.SyscallGroup) {
		pols = append(pols, seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: g})
	}
	refused := []seccomp.SyscallGroup{{Action: seccomp.ActionErrno | errEPERM, Names: namesOn(a, ipcSyscalls)}}
	if v.NodeUser {
		refused = append(refused, seccomp.SyscallGroup{Action: seccomp.ActionErrno | errEPERM, Names: namesOn(a, ownerByPath)})
	}
	if v.ProxyOnly {
		refused = append(refused, seccomp.SyscallGroup{Action: seccomp.ActionErrno | errEPERM, Names: []string{"listen"}})
	}
	one(refused...)
	// No unix socket of its own: connect(2) to a socket file is not Landlock's
	// to refuse below ABI 9, and the node's and the user's sockets are files.
	// socketpair(2) stays.
	one(seccomp.SyscallGroup{Action: seccomp.ActionErrno | errEAFNOSUPPORT, NamesWithCondtions: []seccomp.NameWithConditions{
		{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: afUNIX}}},
	}})
	if !v.ProxyOnly {
		return pols
	}
	var socket []seccomp.NameWithConditions
	for _, fam := range []uint64{afINET, afINET6} {
		is := seccomp.Condition{Argument: 0, Operation: seccomp.Equal, Value: fam}
		socket = append(socket,
			// not SOCK_STREAM: bit 0 clear, or any other type bit set
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{is, {Argument: 1, Operation: seccomp.BitsNotSet, Value: sockStream}}},
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{is, {Argument: 1, Operation: seccomp.BitsSet, Value: sockTypeHigh}}},
			// a protocol other than TCP (MPTCP, SCTP)
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{is,
				{Argument: 2, Operation: seccomp.NotEqual, Value: 0}, {Argument: 2, Operation: seccomp.NotEqual, Value: ipprotoTCP}}},
		)
	}
	one(seccomp.SyscallGroup{Action: seccomp.ActionErrno | errEACCES, NamesWithCondtions: socket})
	for _, c := range []struct {
		name  string
		flags uint32
	}{{"sendto", 3}, {"sendmsg", 2}, {"sendmmsg", 3}} {
		one(seccomp.SyscallGroup{Action: seccomp.ActionErrno | errEPERM, NamesWithCondtions: []seccomp.NameWithConditions{
			{Name: c.name, Conditions: seccomp.ArgumentConditions{{Argument: c.flags, Operation: seccomp.BitsSet, Value: msgFastOpen}}},
		}})
	}
	return pols
}

// landlockVariants are every landlockVariant, in index order.
var landlockVariants = func() []landlockVariant {
	out := make([]landlockVariant, 4)
	for i := range out {
		out[i] = landlockVariant{ProxyOnly: i&1 != 0, NodeUser: i&2 != 0}
	}
	return out
}()

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
	return withPreamble(a, body)
}

// landlockFilter is the Landlock tier's profile for a variant, assembled with the
// same preamble: the policies one after another, each one's allow (its last
// instruction, where every path that decides nothing ends) turned into a jump to
// the next one, which loads the architecture and the number afresh.
func landlockFilter(a *arch.Info, v landlockVariant) ([]bpf.Instruction, error) {
	pols := landlockPolicies(a, v)
	var body []bpf.Instruction
	for i, pol := range pols {
		part, err := pol.Assemble()
		if err != nil {
			return nil, fmt.Errorf("assemble seccomp policy for %s: %w", a.Name, err)
		}
		if ret, ok := part[len(part)-1].(bpf.RetConstant); !ok || ret.Val != uint32(seccomp.ActionAllow) {
			return nil, fmt.Errorf("seccomp policy %d for %s does not end in its allow", i, a.Name)
		}
		if i < len(pols)-1 {
			part[len(part)-1] = bpf.Jump{Skip: 0}
		}
		body = append(body, part...)
	}
	return withPreamble(a, body)
}

// withPreamble puts the preamble every shipped filter has before an assembled
// policy.
func withPreamble(a *arch.Info, body []bpf.Instruction) ([]bpf.Instruction, error) {
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

// rawFilter is a program as the raw sock_filter array bwrap reads (8 bytes per
// instruction, little-endian on both shipped architectures).
func rawFilter(prog []bpf.Instruction) ([]byte, error) {
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

// shippedProgram decodes a shipped raw filter back into instructions.
func shippedProgram(t *testing.T, raw []byte) []bpf.Instruction {
	t.Helper()
	if len(raw)%8 != 0 || len(raw) == 0 {
		t.Fatalf("a raw filter of %d bytes", len(raw))
	}
	var prog []bpf.Instruction
	for i := 0; i < len(raw); i += 8 {
		prog = append(prog, bpf.RawInstruction{
			Op: binary.LittleEndian.Uint16(raw[i:]), Jt: raw[i+2], Jf: raw[i+3], K: binary.LittleEndian.Uint32(raw[i+4:]),
		}.Disassemble())
	}
	return prog
}

// The filters the node ships are exactly the policy above, assembled; -update
// rewrites seccomp_filters.go after a change of the policy.
func TestSeccompFiltersGenerated(t *testing.T) {
	var src bytes.Buffer
	src.WriteString("// Code generated by `go test ./backend_linux -run TestSeccompFiltersGenerated -update`. DO NOT EDIT.\n\n")
	src.WriteString("package backendlinux\n\n// The default seccomp profile, assembled (seccomp_assemble_test.go).\n")
	for _, a := range seccompArchs {
		prog, err := seccompFilter(a.info)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := rawFilter(prog)
		if err != nil {
			t.Fatal(err)
		}
		shipped, _ := archFor(a.goarch)
		if !golden.Updating() && (shipped == nil || !bytes.Equal(shipped.filter, raw) || strings.Join(shipped.denied, ",") != strings.Join(deniedOn(a.info), ",")) {
			t.Errorf("%s: the shipped seccomp filter is not the policy's: run go test ./backend_linux -run TestSeccompFiltersGenerated -update", a.goarch)
		}
		fmt.Fprintf(&src, "\nvar seccompDenied%s = []string{%q", a.suffix, deniedOn(a.info)[0])
		for _, n := range deniedOn(a.info)[1:] {
			fmt.Fprintf(&src, ", %q", n)
		}
		fmt.Fprintf(&src, "}\n\nvar seccompFilter%s = []byte{", a.suffix)
		writeBytes(&src, "\n\t", raw)
		src.WriteString("\n}\n")
		fmt.Fprintf(&src, "\n// The Landlock tier's profiles, by landlockVariant.index.\nvar seccompLandlock%s = [4][]byte{", a.suffix)
		for _, v := range landlockVariants {
			prog, err := landlockFilter(a.info, v)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := rawFilter(prog)
			if err != nil {
				t.Fatal(err)
			}
			if !golden.Updating() && (shipped == nil || !bytes.Equal(shipped.landlock[v.index()], raw)) {
				t.Errorf("%s: the shipped Landlock seccomp filter %+v is not the policy's: run go test ./backend_linux -run TestSeccompFiltersGenerated -update", a.goarch, v)
			}
			fmt.Fprintf(&src, "\n\t{ // %+v", v)
			writeBytes(&src, "\n\t\t", raw)
			src.WriteString("\n\t},")
		}
		src.WriteString("\n}\n")
	}
	if golden.Updating() {
		if err := os.WriteFile("seccomp_filters.go", src.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeBytes writes b as Go byte literals, eight to a line, each line opened by nl.
func writeBytes(w *bytes.Buffer, nl string, b []byte) {
	for i, c := range b {
		if i%8 == 0 {
			w.WriteString(nl)
		} else {
			w.WriteString(" ")
		}
		fmt.Fprintf(w, "0x%02x,", c)
	}
}
