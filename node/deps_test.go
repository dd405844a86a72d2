package node

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "oz0.ai/node"

// listed is what the boundary checks need from `go list -deps -json`.
type listed struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// goList runs `go list -deps -json` for patterns under goos and returns every
// package it names, the patterns' own and their dependencies.
func goList(t *testing.T, goos string, patterns ...string) map[string]listed {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the dependency checks need the go command: %v", err)
	}
	cmd := exec.Command(goTool, append([]string{"list", "-deps", "-json"}, patterns...)...)
	cmd.Dir = ".."
	cmd.Env = append(cmd.Environ(), "GOOS="+goos)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %v (GOOS=%s): %v\n%s", patterns, goos, err, ee.Stderr)
		}
		t.Fatalf("go list %v (GOOS=%s): %v", patterns, goos, err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

var oses = []string{"linux", "darwin"}

// The core imports no sandbox backend, service, terminal UI or command: those
// depend on the core, never the other way, so the core builds and is tested on
// every OS and a binary without a terminal UI stays possible.
func TestCoreImportsNoBackendServiceOrTUI(t *testing.T) {
	forbidden := func(dep string) bool {
		for _, p := range []string{"backend_linux", "backend_darwin", "service", "tui", "cmd"} {
			if dep == module+"/"+p || strings.HasPrefix(dep, module+"/"+p+"/") {
				return true
			}
		}
		return strings.HasPrefix(dep, "charm.land/") ||
			strings.HasPrefix(dep, "github.com/charmbracelet/")
	}
	for _, goos := range oses {
		pkgs := goList(t, goos, "./node/...")
		core := 0
		for path, p := range pkgs {
			if !strings.HasPrefix(path, module+"/node/") && path != module+"/node" {
				continue
			}
			core++
			for _, dep := range p.Deps {
				if forbidden(dep) {
					t.Errorf("GOOS=%s: %s depends on %s", goos, path, dep)
				}
			}
		}
		if core < 10 {
			t.Fatalf("GOOS=%s: go list named only %d core packages; the check would prove nothing", goos, core)
		}
	}
}

// pureAllowed are the packages outside the standard library that the pure packages
// may depend on: the module's other pure packages and name-handling libraries that
// do no I/O. node/api is here because policy returns its finding types; it is to
// become a leaf package of plain types.
var pureAllowed = []string{
	module + "/node/manifest",
	module + "/node/policy",
	module + "/node/netrule",
	module + "/node/api",
	module + "/internal/lazyre", // regexp compiled at first use: no I/O
	"golang.org/x/net/idna",
	"golang.org/x/net/publicsuffix",
	"golang.org/x/text/",
}

// The manifest parser and the policy decide; they never act. They may use the
// standard library (the manifest reads the plugin's files beneath an os.Root), but
// no other library that does I/O, and neither may start a process; the policy
// itself imports neither os nor syscall.
func TestPurePackagesDoNoIO(t *testing.T) {
	allowed := func(dep string) bool {
		return slices.ContainsFunc(pureAllowed, func(a string) bool {
			return dep == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(dep, a))
		})
	}
	// "net" is not banned: its pure helpers (JoinHostPort, SplitHostPort) are used;
	// a dial would still need a test here to catch it.
	ownImportsBanned := map[string][]string{
		module + "/node/manifest": {"os/exec", "net/http"},
		module + "/node/policy":   {"os", "os/exec", "net/http", "syscall", "io/fs"},
	}
	for _, goos := range oses {
		pkgs := goList(t, goos, "./node/manifest", "./node/policy")
		for path, banned := range ownImportsBanned {
			p, ok := pkgs[path]
			if !ok {
				t.Fatalf("GOOS=%s: go list did not name %s", goos, path)
			}
			for _, dep := range p.Deps {
				if pkgs[dep].Standard {
					if dep == "os/exec" {
						t.Errorf("GOOS=%s: %s depends on os/exec: a pure package never starts a process", goos, path)
					}
					continue
				}
				if !allowed(dep) {
					t.Errorf("GOOS=%s: %s depends on %s, which is not on the pure allowlist", goos, path, dep)
				}
			}
			for _, imp := range p.Imports {
				if slices.Contains(banned, imp) {
					t.Errorf("GOOS=%s: %s imports %s", goos, path, imp)
				}
			}
		}
	}
}

// What runs and reports plugins reads what is installed (node/installed) and
// readies plugin users (node/pluginuser); it never links the install builders
// (git, wheels, npm, the build sandbox), and neither do those two packages.
func TestReadersImportNoBuilder(t *testing.T) {
	builder := module + "/node/install"
	readers := []string{"./node/plan", "./node/daemon", "./node/installed", "./node/pluginuser"}
	for _, goos := range oses {
		pkgs := goList(t, goos, readers...)
		for _, r := range readers {
			path := module + strings.TrimPrefix(r, ".")
			p, ok := pkgs[path]
			if !ok {
				t.Fatalf("GOOS=%s: go list did not name %s", goos, path)
			}
			if slices.Contains(p.Deps, builder) {
				t.Errorf("GOOS=%s: %s depends on %s", goos, path, builder)
			}
		}
	}
}

// The proxy (node/egress, its DNS server, its address guard) is linked only by
// what serves egress endpoints: the daemon, the starter, the install's build
// sandbox and the commands. Every other package of the module, present or
// future, reaches the proxy through a socket or an interface, if at all (the
// remote servers' transport in node/serverconn speaks CONNECT to its socket).
func TestOnlyEndpointServersLinkTheProxy(t *testing.T) {
	proxy := []string{module + "/node/egress", "github.com/miekg/dns", "code.dny.dev/ssrf"}
	servers := []string{module + "/node/egress", module + "/node/daemon", module + "/node/launch", module + "/node/install"}
	for _, goos := range oses {
		pkgs := goList(t, goos, "./...")
		for path, p := range pkgs {
			if !strings.HasPrefix(path, module+"/") || slices.Contains(servers, path) ||
				strings.HasPrefix(path, module+"/cmd/") {
				continue
			}
			for _, dep := range p.Deps {
				if slices.Contains(proxy, dep) {
					t.Errorf("GOOS=%s: %s links %s; only %v and the commands may", goos, path, dep, servers)
				}
			}
		}
	}
}

// What decides, plans and diagnoses never links the egress proxy (its DNS server,
// its address guard): the tenant list's type and parser live in node/netrule and
// its reading in node/datadir, so a backend, a plan or the doctor reads the list
// without carrying the proxy. Only what serves endpoints (the daemon, the
// starter, the install's build sandbox, the command) links it.
func TestDecidersDoNotLinkTheProxy(t *testing.T) {
	proxy := []string{module + "/node/egress", "github.com/miekg/dns", "code.dny.dev/ssrf"}
	deciders := []string{"./node/plan", "./node/policy", "./node/doctor", "./node/config", "./node/sandbox",
		"./node/sandbox/probe", "./node/pluginuser", "./node/installed", "./backend_linux", "./backend_darwin"}
	for _, goos := range oses {
		pkgs := goList(t, goos, deciders...)
		for _, d := range deciders {
			path := module + strings.TrimPrefix(d, ".")
			p, ok := pkgs[path]
			if !ok {
				t.Fatalf("GOOS=%s: go list did not name %s", goos, path)
			}
			for _, dep := range p.Deps {
				if slices.Contains(proxy, dep) {
					t.Errorf("GOOS=%s: %s links %s", goos, path, dep)
				}
			}
		}
	}
}

// The MCP doors (node/mcpdoor) and the listeners' pieces beneath them
// (node/conncap, node/peer) know the gateway alone: what a call meets behind a
// door — the tool rules, approvals, audit, traces, hooks — reaches them through
// the gateway the daemon built, never as a package they link; and nothing the
// daemon runs (plans, starts, sandboxes, servers' transports, the proxy) is
// theirs. So a door is the same door whatever the daemon wires behind it, and
// no door reaches back up into the daemon.
func TestDoorsLinkNothingBehindTheGateway(t *testing.T) {
	doors := []string{"./node/mcpdoor", "./node/conncap", "./node/peer"}
	var behind []string
	for _, p := range []string{"daemon", "launch", "plan", "policy", "sandbox", "supervise", "serverconn",
		"egress", "install", "toolrule", "approval", "audit", "tracing", "hookrun"} {
		behind = append(behind, module+"/node/"+p)
	}
	for _, goos := range oses {
		pkgs := goList(t, goos, doors...)
		for _, d := range doors {
			path := module + strings.TrimPrefix(d, ".")
			p, ok := pkgs[path]
			if !ok {
				t.Fatalf("GOOS=%s: go list did not name %s", goos, path)
			}
			for _, dep := range p.Deps {
				if slices.Contains(behind, dep) {
					t.Errorf("GOOS=%s: %s depends on %s", goos, path, dep)
				}
			}
		}
	}
}

// The binary links no gRPC, no generated protobuf messages and no protobuf
// runtime: their package initialisers run in every oz0-node process, tracing
// on or off, and cost the node ~6 MB resident (docs/performance.md, "What 25 MB
// would take"); the OTLP exporter and the metrics are built without them.
func TestBinaryLinksNoGRPCOrProtobufRuntime(t *testing.T) {
	bad := []string{"google.golang.org/grpc", "google.golang.org/genproto", "go.opentelemetry.io/proto/",
		"go.opentelemetry.io/otel/exporters/", "google.golang.org/protobuf/proto", "google.golang.org/protobuf/runtime/",
		"google.golang.org/protobuf/reflect/", "github.com/prometheus/client_golang"}
	for _, goos := range oses {
		for dep := range goList(t, goos, "./cmd/oz0-node") {
			for _, b := range bad {
				if strings.HasPrefix(dep, b) {
					t.Errorf("GOOS=%s: oz0-node links %s", goos, dep)
				}
			}
		}
	}
}
