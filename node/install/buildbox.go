package install

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// BuildSandbox is where a strict build runs the one tool it needs (npm, with
// scripts off): a sandbox backend that works on this node. The tool sees the
// plugin's files in staging as the only writable place besides a home of its own,
// runs as the plugin's user on a root Linux node, and reaches only the package
// registry, through an egress proxy of the node's own started for the build.
type BuildSandbox struct {
	Backend sandbox.Backend
	// NodeBinary is the node's executable, bound in for the egress bridge where the
	// proxy cannot be served inside the sandbox's namespace (a node not running as
	// root). Empty: such a sandbox has no network.
	NodeBinary string
}

// buildLimits bound a build sandbox: npm on a large tree needs more memory than a
// server's default, and a build is not held to one core.
var buildLimits = sandbox.Limits{
	MemoryBytes:   2 << 30,
	Pids:          1024,
	OpenFiles:     4096,
	FileSizeBytes: 1 << 30,
	Procs:         4096,
}

// buildUser is who runs a sandboxed build: the plugin's own user on a root Linux
// node whose data folder others can traverse (as for the plugin's servers), else
// the node's user.
func (b *builder) buildUser() (uid, gid uint32, perPlugin bool) {
	if ok, _ := datadir.TraversableByOthers(b.d.Root); ok && runtime.GOOS == "linux" && os.Geteuid() == 0 {
		u := policy.PluginUID(b.plugin)
		return u, u, true
	}
	return uint32(os.Geteuid()), uint32(os.Getegid()), false
}

// sandboxed runs one build tool (argv, with env on top of the build's own) in the
// build sandbox, in the plugin tree. It returns a description of where it ran.
func (b *builder) sandboxed(argv []string, env []string) (desc string, err error) {
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	be := b.box.Backend
	uid, gid, perPlugin := b.buildUser()
	home := filepath.Join(b.staging, "build-home")
	for _, p := range []string{home, filepath.Join(home, "tmp")} {
		if err := os.Mkdir(p, 0o700); err != nil && !os.IsExist(err) {
			return "", fmt.Errorf("build sandbox: %w", err)
		}
	}

	reg, err := b.registry()
	if err != nil {
		return "", err
	}
	// The build's own proxy: the node's egress proxy code (address guard included),
	// with a list of one host — the registry — as both manifest and tenant list.
	ie, err := newInstallEgress(b.staging, "build-"+b.plugin, "package registry", []hostPort{reg.hostPort}, b.allowCIDRs, b.log)
	if err != nil {
		return "", fmt.Errorf("build sandbox: %w", err)
	}
	defer ie.Close()
	host := reg.hostPort.host

	rs, _ := installed.LoadRuntimes(b.d)
	in := buildSpecIn{
		backend: be.Name(), argv: argv, env: env, home: home,
		uid: uid, gid: gid, perPlugin: perPlugin, root: os.Geteuid() == 0,
	}
	if rs != nil {
		in.runtimes = rs.Paths()
	}
	attach, cleanup, err := b.buildEgress(&in, ie)
	if err != nil {
		return "", fmt.Errorf("build sandbox: %w", err)
	}
	defer cleanup()
	s := b.buildSpec(in)
	if attach != nil {
		s.Proxy.Attach = attach
	}

	if perPlugin {
		// The backend gives the plugin's user the search bit on the way down from
		// the data folder (staging is private otherwise); taken back below.
		defer b.narrowStaging()
		if err := chownTree(b.tree, int(uid), int(gid)); err != nil {
			return "", fmt.Errorf("build sandbox: hand the plugin tree to uid %d: %w", uid, err)
		}
		if err := chownTree(home, int(uid), int(gid)); err != nil {
			return "", fmt.Errorf("build sandbox: %w", err)
		}
	}
	// Whatever happens, the tree is the node's again before anything reads it.
	defer func() {
		if perPlugin {
			if rerr := reclaimTree(b.tree); rerr != nil && err == nil {
				err = fmt.Errorf("build sandbox: take the plugin tree back: %w", rerr)
			}
		}
	}()

	proc, err := be.Command(ctx, s)
	if err != nil {
		return "", fmt.Errorf("build sandbox: %w", err)
	}
	var out bytes.Buffer
	proc.Cmd.Stdout, proc.Cmd.Stderr = &out, &out
	b.log.Debug("build command in sandbox", "plugin", b.plugin, "backend", be.Name(), "uid", uid, "argv", argv)
	// Started as every sandbox is (born in its cgroup where the backend can).
	runErr := proc.Start()
	if runErr == nil {
		runErr = proc.Cmd.Wait()
	}
	if proc.Cleanup != nil {
		proc.Cleanup()
	}
	if runErr != nil {
		tail := out.String()
		if len(tail) > 3000 {
			tail = "…" + tail[len(tail)-3000:]
		}
		if why := ie.refusals(); why != "" {
			tail += "\n(" + why + ")"
		}
		return "", fmt.Errorf("%s (in a %s build sandbox): %w\n%s", strings.Join(argv, " "), be.Name(), runErr, strings.TrimSpace(tail))
	}
	return fmt.Sprintf("in a %s build sandbox as %s (only the plugin's files writable; network only %s through the node's egress proxy)", be.Name(), b.buildWho(uid, perPlugin), host), nil
}

// buildEgress gives the build sandbox its way to the build's own proxy: a port of
// the host's loopback with a credential where the backend has no network
// namespace (Seatbelt, Landlock), a listener opened in its namespace where the
// node can (attach), else a socket bound in and served by the bridge. cleanup
// removes what it made.
func (b *builder) buildEgress(in *buildSpecIn, ie *installEgress) (attach func(string) (func(), error), cleanup func(), err error) {
	px, rules := ie.px, ie.rules
	cleanup = func() {}
	switch {
	case in.backend == policy.BackendSeatbelt || in.backend == policy.BackendLandlock:
		// No network namespace to serve the proxy in: a port of the host's
		// loopback, which every local process can reach, so it takes a
		// credential of this build's own, given to the build tool alone.
		var secret [32]byte
		rand.Read(secret[:])
		in.hostCred = hex.EncodeToString(secret[:])
		ep, err := px.AddPlugin(rules, egress.Listen{TCP: true, Credential: in.hostCred})
		if err != nil {
			return nil, cleanup, err
		}
		in.hostPort = int(ep.TCP.Port())
	default:
		if attach = attachInNetns(px, rules, in.backend); attach != nil {
			return attach, cleanup, nil
		}
		// A socket bound in, served by the bridge: under run/ (traversable, never
		// listable) for a path short enough for a unix socket.
		netDir, err := os.MkdirTemp(b.d.Run(), "build-")
		if err != nil {
			return nil, cleanup, err
		}
		cleanup = func() { os.RemoveAll(netDir) }
		if err := os.Chmod(netDir, 0o711); err != nil {
			return nil, cleanup, err
		}
		if _, err := px.AddPlugin(rules, egress.Listen{Socket: filepath.Join(netDir, sandbox.ProxySocket)}); err != nil {
			return nil, cleanup, err
		}
		in.socketDir, in.nodeBinary = netDir, b.box.NodeBinary
	}
	return nil, cleanup, nil
}

// buildWho says who a build ran as, and why not as the plugin's own user on a
// root node where that is off.
func (b *builder) buildWho(uid uint32, perPlugin bool) string {
	who := "the node's user"
	switch {
	case perPlugin:
		who = fmt.Sprintf("the plugin's user %d", uid)
	case runtime.GOOS == "linux" && os.Geteuid() == 0:
		_, blocker := datadir.TraversableByOthers(b.d.Root)
		who += fmt.Sprintf(" (per-plugin users are off: other users cannot traverse %s)", blocker)
	}
	return who
}

// buildSpecIn is what a build sandbox is made of on this node.
type buildSpecIn struct {
	backend   string
	argv, env []string
	home      string // the build's own home (npm's cache), in staging
	uid, gid  uint32
	perPlugin bool
	root      bool
	runtimes  []string
	// hostPort is the proxy's port on the host loopback (Seatbelt, Landlock); 0
	// where the proxy answers inside the sandbox's own network namespace.
	hostPort int
	// hostCred is the credential that port requires, in the build's proxy URLs.
	hostCred string
	// socketDir is the proxy socket's folder to bind in for the bridge; "" when the
	// node serves the proxy inside the namespace itself.
	socketDir, nodeBinary string
}

// buildSpec is the sandbox a build tool runs in. It decides only: the plugin tree
// and the build's home are the only writable places, the network is the build's
// proxy, the user is in.uid.
func (b *builder) buildSpec(in buildSpecIn) *sandbox.Spec {
	s := &sandbox.Spec{
		Plugin: b.plugin, Kind: "build", Commit: b.commit, Backend: in.backend,
		Argv: in.argv, Dir: filepath.Join(b.tree, filepath.FromSlash(b.workDir)), Network: policy.NetProxy, Seccomp: "default",
		Hostname: "oz0-build", PluginDir: b.tree, Home: in.home, DataDir: b.d.Root,
		UID: in.uid, GID: in.gid, PluginUser: in.perPlugin,
		Limits: buildLimits,
	}
	if !in.perPlugin {
		s.Limits.Procs = 0 // RLIMIT_NPROC would count every process of the node's user
	}
	if !in.root {
		// Only root makes cgroups; the rlimits still hold.
		s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.CPUPercent = 0, 0, 0
	}
	port, tmp := sandbox.DefaultProxyPort, "/tmp"
	if in.backend == policy.BackendSeatbelt {
		// No mount namespace: the plugin tree is writable as part of the staging
		// folder (the sandbox's home); the folder npm lives in is the read-only
		// "plugin folder"; the proxy is a loopback port of the host.
		port, tmp = in.hostPort, filepath.Join(in.home, "tmp")
		s.Home = b.staging
		s.PluginDir = filepath.Dir(b.npmPath)
		s.Proxy = &sandbox.Proxy{Port: port}
		s.Deny = []string{b.d.Root, b.d.Key()}
		for _, r := range in.runtimes {
			if r != s.PluginDir {
				s.Mounts = append(s.Mounts, sandbox.Mount{Source: r, Dest: r})
			}
		}
	} else {
		s.System = append([]sandbox.Mount(nil), sandbox.SystemMounts...)
		s.Mounts = []sandbox.Mount{
			{Source: b.tree, Dest: b.tree, Writable: true},
			{Source: in.home, Dest: in.home, Writable: true},
		}
		for _, r := range in.runtimes {
			if !underSystem(r) {
				s.Mounts = append(s.Mounts, sandbox.Mount{Source: r, Dest: r})
			}
		}
		s.Proxy = &sandbox.Proxy{SocketName: sandbox.ProxySocket, InnerDir: sandbox.InnerProxyDir, Port: port}
		if in.backend == policy.BackendLandlock {
			// No network namespace: the proxy is a loopback port of the host,
			// the one port the sandbox may connect to.
			port = in.hostPort
			s.Proxy = &sandbox.Proxy{Port: port}
		} else if in.socketDir != "" {
			s.Proxy.SocketDir = in.socketDir
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: in.socketDir, Dest: sandbox.InnerProxyDir})
			if in.nodeBinary != "" {
				s.Bridge = sandbox.InnerNodeBin
				s.Mounts = append(s.Mounts, sandbox.Mount{Source: in.nodeBinary, Dest: sandbox.InnerNodeBin})
			}
		}
	}
	proxy := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	if in.hostCred != "" {
		proxy.User = url.UserPassword(sandbox.ProxyUser, in.hostCred)
	}
	proxyURL := proxy.String()
	s.Env = append([]string{
		"PATH=" + filepath.Dir(b.nodePath) + ":" + sandbox.MinimalPath,
		"HOME=" + in.home, "LC_ALL=C.UTF-8", "TMPDIR=" + tmp,
		"HTTPS_PROXY=" + proxyURL, "HTTP_PROXY=" + proxyURL, "https_proxy=" + proxyURL, "http_proxy=" + proxyURL,
		"NO_PROXY=", "no_proxy=",
	}, in.env...)
	return s
}

// narrowStaging makes staging private again after a build sandbox needed the way
// through it: staging, this install's folder in it and the tree back to 0700.
func (b *builder) narrowStaging() {
	for _, p := range []string{b.d.Staging(), b.staging, b.tree} {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if err := os.Chmod(p, 0o700); err != nil {
				b.log.Warn("staging could not be made private again", "path", p, "err", err)
			}
		}
	}
}

func underSystem(p string) bool {
	for _, m := range sandbox.SystemMounts {
		if p == m.Source || strings.HasPrefix(p, m.Source+"/") {
			return true
		}
	}
	return false
}

// chownTree gives every file and folder under dir to uid:gid, never through a link.
func chownTree(dir string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := root.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
		return nil
	})
}

// reclaimTree gives the tree back to the node's user after a build ran as the
// plugin's: every entry owned by root again, never through a link, with no
// set-id, sticky or group/other write bits left by the build. The sandbox is gone
// by then (its PID namespace ended with it), so nothing of it changes the tree
// while this walks.
func reclaimTree(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := root.Lchown(p, 0, 0); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
		if de.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		perm := fi.Mode().Perm() &^ 0o022
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 || perm != fi.Mode().Perm() {
			if err := root.Chmod(p, perm); err != nil {
				return fmt.Errorf("chmod %s: %w", p, err)
			}
		}
		return nil
	})
}
