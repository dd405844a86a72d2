package datadir

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func newDir(t *testing.T) Dir {
	t.Helper()
	d, err := New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCreateMakesTheLayoutWithModes(t *testing.T) {
	for _, rootNode := range []bool{true, false} {
		name := "user node"
		top := fs.FileMode(0o700)
		if rootNode {
			name, top = "root node", 0o711
		}
		t.Run(name, func(t *testing.T) {
			old := syscall.Umask(0o022) // Create must not depend on the caller's umask
			defer syscall.Umask(old)
			d := newDir(t)
			parent := filepath.Dir(d.Root)
			before := mode(t, parent)
			if err := d.Create(rootNode); err != nil {
				t.Fatal(err)
			}
			want := map[string]fs.FileMode{
				d.Root: top, d.Plugins(): top, d.Homes(): top, d.Run(): top, filepath.Join(d.Run(), "egress"): top,
				d.TenantDir(): top, d.Logs(): 0o700, d.Staging(): 0o700,
			}
			for p, m := range want {
				got := mode(t, p)
				if !got.IsDir() || got.Perm() != m {
					t.Errorf("%s: %v, want a folder %v", p, got, m)
				}
			}
			if got := mode(t, d.Key()); !got.IsRegular() || got.Perm() != 0o600 {
				t.Errorf("key %v, want a 0600 file", got)
			}
			if after := mode(t, parent); after != before {
				t.Errorf("Create changed the folder above the data folder: %v → %v", before, after)
			}
		})
	}
}

func TestCreateFixesModesOfExistingFolders(t *testing.T) {
	d := newDir(t)
	for _, p := range []string{d.Root, d.Logs(), d.Plugins()} {
		if err := os.MkdirAll(p, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o777)
	}
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d.Root, d.Logs(), d.Plugins()} {
		if m := mode(t, p).Perm(); m != 0o700 {
			t.Errorf("%s: %v, want 0700", p, m)
		}
	}
	// A root node switching to a user node (and back) fixes the top again.
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, d.Root).Perm(); m != 0o711 {
		t.Errorf("root node top %v", m)
	}
}

func TestNodeKeyIsEd25519PrivateAndStable(t *testing.T) {
	d := newDir(t)
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	k1, err := d.EnsureKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != ed25519.PrivateKeySize {
		t.Fatalf("key of %d bytes", len(k1))
	}
	b, _ := os.ReadFile(d.Key())
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("key file is not a PEM private key: %q", b)
	}
	if _, ok := mustPKCS8(t, blk.Bytes).(ed25519.PrivateKey); !ok {
		t.Fatal("key file does not hold an ed25519 key")
	}
	// Stable across calls and across Create.
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	k2, err := d.EnsureKey()
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Error("the node key changed between calls")
	}
	// Signatures verify with the public half.
	sig := ed25519.Sign(k2, []byte("hello"))
	if !ed25519.Verify(k1.Public().(ed25519.PublicKey), []byte("hello"), sig) {
		t.Error("signature does not verify")
	}
	// A key file made readable by someone is made private again.
	os.Chmod(d.Key(), 0o644)
	if _, err := d.EnsureKey(); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, d.Key()).Perm(); m != 0o600 {
		t.Errorf("key mode %v after EnsureKey, want 0600", m)
	}
	// Two different data folders have different keys.
	d2 := newDir(t)
	if err := d2.Create(false); err != nil {
		t.Fatal(err)
	}
	k3, _ := d2.EnsureKey()
	if k3.Equal(k1) {
		t.Error("two data folders share a key")
	}
}

func mustPKCS8(t *testing.T, der []byte) any {
	t.Helper()
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEnsureKeyRefusesABadKeyFileWithoutReplacingIt(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	for name, content := range map[string][]byte{
		"not pem":     []byte("garbage"),
		"bad pkcs8":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"not ed25519": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
	} {
		t.Run(name, func(t *testing.T) {
			d := newDir(t)
			os.MkdirAll(d.Root, 0o700)
			os.WriteFile(d.Key(), content, 0o600)
			if _, err := d.EnsureKey(); err == nil || !strings.Contains(err.Error(), d.Key()) {
				t.Errorf("err %v, want one naming %s", err, d.Key())
			}
			if b, _ := os.ReadFile(d.Key()); string(b) != string(content) {
				t.Error("a bad key file was replaced: the node's identity must not change silently")
			}
		})
	}
}

func TestNewValidatesThePath(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, _ := os.Getwd()
	d, err := New("rel/../data/")
	if err != nil || d.Root != filepath.Join(wd, "data") {
		t.Errorf("New(rel) = %q, %v", d.Root, err)
	}
	for _, bad := range []string{"", "/x\ny", "/x\x00y", "/x\ry"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
}

func TestLayoutPaths(t *testing.T) {
	d := Dir{Root: "/d"}
	for got, want := range map[string]string{
		d.Key(): "/d/node.key", d.TenantList(): "/d/tenant/egress", d.PluginCommit("p", "c"): "/d/plugins/p/c",
		d.Current("p"): "/d/plugins/p/current", d.Home("p"): "/d/homes/p", d.Ledger(): "/d/ledger.jsonl",
		d.Status(): "/d/status.json", d.Health(): "/d/health.json", d.Control(): "/d/run/control.sock",
		d.EgressSocketDir("p"): "/d/run/egress/p", d.Audit(): "/d/logs/audit.jsonl", d.ToolRules(): "/d/tenant/tools",
		// A server's folder: within its plugin's, named by a hash of its free-text name.
		d.EgressServerSocketDir("p", "my server"): "/d/run/egress/p/b129874b",
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

func TestDefaultForEachOS(t *testing.T) {
	for _, c := range []struct {
		goos      string
		root      bool
		home, xdg string
		want      string
	}{
		{"linux", true, "/root", "", "/var/lib/oz0-node"},
		{"linux", true, "/root", "/root/.data", "/var/lib/oz0-node"},
		{"linux", false, "/home/u", "", "/home/u/.local/share/oz0-node"},
		{"linux", false, "/home/u", "/data/u", "/data/u/oz0-node"},
		{"linux", false, "/home/u", "relative/xdg", "/home/u/.local/share/oz0-node"},
		{"darwin", false, "/Users/u", "/ignored", "/Users/u/Library/Application Support/oz0-node"},
		{"darwin", true, "/var/root", "", "/Library/Application Support/oz0-node"},
		{"freebsd", false, "/home/u", "", "/home/u/.local/share/oz0-node"},
	} {
		if got := DefaultFor(c.goos, c.root, c.home, c.xdg); got != c.want {
			t.Errorf("DefaultFor(%s, root=%v, %q, %q) = %q, want %q", c.goos, c.root, c.home, c.xdg, got, c.want)
		}
	}
	t.Setenv(EnvVar, "/from/env")
	if Default() != "/from/env" {
		t.Errorf("Default() ignores %s", EnvVar)
	}
}

func TestSetUmaskIs077(t *testing.T) {
	old := SetUmask()
	defer syscall.Umask(old)
	if got := syscall.Umask(0o077); got != 0o077 {
		t.Errorf("umask after SetUmask: %o", got)
	}
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if m := mode(t, p).Perm(); m != 0o600 {
		t.Errorf("a file created under the node's umask is %v", m)
	}
}
