package backendlinux

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"oz0.ai/node/internal/golden"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// commandCase is one Spec whose bwrap command (or refusal) is pinned byte for byte
// in testdata/bwrap-command.golden: the program, argv, environment, credentials,
// and every descriptor the child inherits with what it holds. It pins what
// Bwrap.Command hands to exec, so that a change to its structure that should
// change nothing is proven to change nothing.
type commandCase struct {
	name string
	edit func(n *testNode, s *sandbox.Spec)
}

var commandCases = []commandCase{
	{name: "strict exec, plugin user, limits"},
	{name: "node's user", edit: func(_ *testNode, s *sandbox.Spec) { s.PluginUser, s.UID, s.GID = false, 0, 0 }},
	{name: "no limits", edit: func(_ *testNode, s *sandbox.Spec) { s.Limits = sandbox.Limits{} }},
	{name: "host network", edit: func(_ *testNode, s *sandbox.Spec) { s.Network = policy.NetHostProxyVars }},
	{name: "proxy socket and resolver", edit: func(n *testNode, s *sandbox.Spec) {
		dir := filepath.Join(n.dir.Run(), "egress", "demo")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			n.t.Fatal(err)
		}
		s.Network = policy.NetProxy
		s.Proxy = &sandbox.Proxy{SocketDir: dir, SocketName: sandbox.ProxySocket, InnerDir: sandbox.InnerProxyDir, Resolver: "127.0.0.53"}
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: dir, Dest: sandbox.InnerProxyDir},
			sandbox.Mount{Source: n.node.NodeBinary, Dest: sandbox.InnerNodeBin})
		s.Bridge = sandbox.InnerNodeBin
	}},
	{name: "refuse empty command", edit: func(_ *testNode, s *sandbox.Spec) { s.Argv = nil }},
	{name: "refuse unknown seccomp profile", edit: func(_ *testNode, s *sandbox.Spec) { s.Seccomp = "permissive" }},
	{name: "refuse symlinked bind source", edit: func(n *testNode, s *sandbox.Spec) {
		link := filepath.Join(n.dir.Root, "rt-link")
		if err := os.Symlink("/usr", link); err != nil {
			n.t.Fatal(err)
		}
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: link, Dest: "/opt/rt"})
	}},
	{name: "refuse mount under the home", edit: func(_ *testNode, s *sandbox.Spec) {
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/usr", Dest: s.Home + "/rt"})
	}},
}

// fixedSystem is a system allowlist made under tmp, so the pinned descriptors do
// not depend on what this host's /usr and /etc hold: a folder, a file copied in,
// and a link recreated inside.
func fixedSystem(t *testing.T, tmp string) []sandbox.Mount {
	t.Helper()
	sys := filepath.Join(tmp, "sys")
	for _, d := range []string{"usr/bin", "etc/ssl"} {
		if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sys, "etc/hosts"), []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(sys, "bin")); err != nil {
		t.Fatal(err)
	}
	return []sandbox.Mount{
		{Source: filepath.Join(sys, "usr"), Dest: "/usr"},
		{Source: filepath.Join(sys, "bin"), Dest: "/bin", Optional: true},
		{Source: filepath.Join(sys, "etc/ssl"), Dest: "/etc/ssl"},
		{Source: filepath.Join(sys, "etc/hosts"), Dest: "/etc/hosts"},
		{Source: filepath.Join(sys, "etc/missing"), Dest: "/etc/missing", Optional: true},
	}
}

// describeCommand is everything Bwrap.Command gives exec for s, as text, with the
// test's temporary folder and binary replaced by names.
func describeCommand(t *testing.T, n *testNode, s *sandbox.Spec) string {
	t.Helper()
	tmp := filepath.Dir(n.dir.Root)
	self, _ := os.Executable()
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	norm := func(v string) string {
		v = strings.ReplaceAll(v, self, "<NODE>")
		return strings.ReplaceAll(v, tmp, "<TMP>")
	}
	b := &Bwrap{Path: "/usr/bin/bwrap"}
	p, err := b.Command(context.Background(), s)
	if err != nil {
		return "error: " + norm(err.Error()) + "\n"
	}
	defer func() {
		if err := p.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}()
	var out strings.Builder
	c := p.Cmd
	fmt.Fprintf(&out, "path %s\nargs %q\nenv %q (nil %v)\n", c.Path, norm(strings.Join(c.Args, "\x00")), c.Env, c.Env == nil)
	a := c.SysProcAttr
	fmt.Fprintf(&out, "pdeathsig %v setsid %v credential %+v\n", a.Pdeathsig, a.Setsid, a.Credential)
	fmt.Fprintf(&out, "stdin %v stdout %v stderr %v\n", c.Stdin, c.Stdout, c.Stderr)
	for i, f := range c.ExtraFiles {
		fd := 3 + i
		if f == nil {
			fmt.Fprintf(&out, "fd %d: nil\n", fd)
			continue
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatalf("fd %d (%s): %v", fd, f.Name(), err)
		}
		kind := fi.Mode().Type().String()
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatalf("fd %d (%s): flags: %v", fd, f.Name(), err)
		}
		access := map[int]string{unix.O_RDONLY: "read", unix.O_WRONLY: "write", unix.O_RDWR: "read-write"}[fl&unix.O_ACCMODE]
		if fl&unix.O_PATH != 0 {
			access = "path"
		}
		content := ""
		if fi.Mode().IsRegular() && access != "path" {
			data := make([]byte, fi.Size())
			if _, err := f.ReadAt(data, 0); err != nil {
				t.Fatalf("read fd %d (%s): %v", fd, f.Name(), err)
			}
			text := norm(string(data))
			content = fmt.Sprintf(" %d bytes %q", len(text), text)
			if f.Name() == "oz0-seccomp" {
				content = fmt.Sprintf(" %d bytes sha256 %x (%s)", len(data), sha256.Sum256(data), runtime.GOARCH)
			}
		}
		fmt.Fprintf(&out, "fd %d: %s %s %s%s\n", fd, norm(f.Name()), kind, access, content)
	}
	return out.String()
}

// Bwrap.Command's whole hand-over to exec is as pinned, for each case.
func TestBwrapCommandGolden(t *testing.T) {
	needRoot(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the pinned seccomp filter is amd64's: Bwrap.Command's hand-over is not compared on " + runtime.GOARCH)
	}
	withBridge(t, true)
	var all strings.Builder
	for _, c := range commandCases {
		n := newTestNode(t, &Bwrap{Path: "/usr/bin/bwrap"}, "demo")
		s := n.spec("demo", "python3", "-c", "print(1)")
		s.System = fixedSystem(t, filepath.Dir(n.dir.Root))
		if c.edit != nil {
			c.edit(n, s)
		}
		fmt.Fprintf(&all, "=== %s\n%s", c.name, describeCommand(t, n, s))
	}
	golden.Check(t, "bwrap-command.golden", all.String())
}
