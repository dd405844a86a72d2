// Package probe finds which sandbox backends work on this machine and chooses the
// node's tier and default backend from them, with the findings that explain a
// backend that does not work. The backends themselves come in from the command's
// per-OS wiring (Platform): this package, like the rest of the core, imports
// none of them. Verdicts are kept per data folder (Cache) so short-lived commands
// do not probe every backend again.
package probe

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Platform is what this OS offers: its backends in the order auto prefers them,
// the program each runs (whose identity keys the cache), and, optionally, a
// reader of a failed probe that names the kernel setting behind it with its fix.
type Platform struct {
	Backends []sandbox.Backend
	Tool     func(backend string) string
	Explain  func(backend string, pr sandbox.Probe, errText string) (cause, fix string)
}

// Verdict is what a node decides with: the OS whose backends were probed (or
// assumed), the tier, the default backend, and whether gVisor works (for plugins
// raised to it).
type Verdict struct {
	OS      string
	Tier    int
	Backend string
	GVisor  bool
}

// Assume is the verdict of a node where backend works on goos, without probing
// (previews: sandbox show, plugin show without a running node).
func Assume(goos, backend string, gvisor bool) Verdict {
	return Verdict{OS: goos, Tier: 1, Backend: backend, GVisor: gvisor}
}

// Running is the verdict a running node's status reports; false when it reports
// none.
func Running(st *api.Status) (Verdict, bool) {
	if st == nil || st.Node.Backend == "" {
		return Verdict{}, false
	}
	v := Verdict{OS: st.Node.OS, Tier: st.Node.Tier, Backend: st.Node.Backend}
	for _, b := range st.Node.Backends {
		if b.Name == policy.BackendGVisor && b.Works {
			v.GVisor = true
		}
	}
	return v, true
}

// Result is what the probe found: the node's default backend, the tier, and
// every backend that works (by name).
type Result struct {
	Backend  string
	Tier     int
	GVisor   bool
	Works    map[string]sandbox.Backend
	Probes   []api.BackendProbe
	Findings []api.Finding
	// unprobed are backends neither probed now nor known from the cache: a
	// short-lived command that turns out to need one probes it then (Later).
	unprobed map[string]sandbox.Backend
	cache    *Cache
	pl       Platform
}

// Verdict is what the node decides with.
func (r *Result) Verdict() Verdict {
	return Verdict{OS: runtime.GOOS, Tier: r.Tier, Backend: r.Backend, GVisor: r.GVisor}
}

// Run runs a trivial sandbox with each of the platform's backends and picks the
// node's default. auto prefers bwrap (start latency and namespaces), then gVisor,
// then Landlock (no namespaces: where user namespaces are refused), then Seatbelt;
// an explicitly requested backend that does not work fails closed; none working
// is tier 0 with its finding.
//
// With a cache (LoadCache: commands that start one sandbox, such as exec and
// hooks), a backend the data folder's cache knows to work under the current key is
// not probed again, `--backend B` probes only B, and auto probes in order of
// preference only until one works. What it probes it records. A nil or refreshing
// cache (RefreshCache: the node at start) probes every backend for real.
func Run(ctx context.Context, pl Platform, requested string, pc *Cache) (*Result, error) {
	return run(ctx, pl, requested, pc, pc != nil && !pc.refresh)
}

// run probes; lazy leaves unprobed what the request does not need.
func run(ctx context.Context, pl Platform, requested string, pc *Cache, lazy bool) (*Result, error) {
	r := &Result{Works: map[string]sandbox.Backend{policy.BackendNone: sandbox.Direct{}}, unprobed: map[string]sandbox.Backend{}, cache: pc, pl: pl}
	if requested == policy.BackendNone {
		r.Backend = policy.BackendNone
		r.Findings = append(r.Findings, tier0Finding("--backend none was given"))
		return r, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var whyNot []string // per backend that does not work, why (for the tier-0 and Landlock findings)
	var usernsFix string
	found := false // a backend auto would take works (pl.Backends is in auto's order)
	for _, b := range pl.Backends {
		if cp, ok := pc.cached(b.Name()); ok {
			r.Works[b.Name()] = b
			r.Probes = append(r.Probes, api.BackendProbe{Name: b.Name(), Works: true, Version: cp.Version, Gaps: cp.Gaps})
			found = true
			continue
		}
		if lazy && (requested == "auto" && found || requested != "auto" && requested != b.Name()) {
			r.unprobed[b.Name()] = b
			continue
		}
		pr := b.Probe(pctx)
		pc.record(pr)
		ap := api.BackendProbe{Name: b.Name(), Works: pr.Works, Version: pr.Version, Gaps: pr.Gaps}
		if pr.Err != nil {
			ap.Error = pr.Err.Error()
		}
		r.Probes = append(r.Probes, ap)
		why := ap.Error
		cause, fix := pl.explain(b.Name(), pr, ap.Error)
		if cause != "" {
			why, usernsFix = cause, fix
		}
		if !pr.Works {
			whyNot = append(whyNot, b.Name()+": "+why)
		}
		if pr.Works {
			r.Works[b.Name()] = b
			found = true
		} else if requested == b.Name() || requested == "auto" {
			sev := api.SevWarning
			if requested == b.Name() {
				sev = api.SevError
			}
			f := api.Finding{Code: api.CodeBackendUnavailable, Severity: sev, Subject: b.Name(),
				Message: fmt.Sprintf("sandbox backend %s does not work here: %s", b.Name(), ap.Error),
				Fix:     fixFor(b.Name())}
			if cause != "" {
				f.Message += " (" + cause + ")"
				f.Fix = fix
			}
			r.Findings = append(r.Findings, f)
		}
	}
	pc.save()
	_, r.GVisor = r.Works[policy.BackendGVisor]
	if requested != "auto" {
		if _, ok := r.Works[requested]; !ok {
			return r, fmt.Errorf("--backend %s was requested and does not work on this node (%s); nothing is started", requested, probeError(r.Probes, requested))
		}
		r.Backend, r.Tier = requested, 1
		return r, nil
	}
	for _, name := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock, policy.BackendSeatbelt} {
		if _, ok := r.Works[name]; ok {
			r.Backend, r.Tier = name, 1
			if name == policy.BackendLandlock {
				r.Findings = append(r.Findings, landlockFinding(whyNot, usernsFix))
			}
			return r, nil
		}
	}
	r.Backend = policy.BackendNone
	why := "no sandbox backend works on this node"
	if len(whyNot) > 0 {
		why += " (" + strings.Join(whyNot, "; ") + ")"
	}
	f := tier0Finding(why)
	if usernsFix != "" {
		f.Fix = usernsFix + "; oz0-node doctor names what stops each backend"
	}
	r.Findings = append(r.Findings, f)
	return r, nil
}

func (pl Platform) explain(backend string, pr sandbox.Probe, errText string) (cause, fix string) {
	if pl.Explain == nil {
		return "", ""
	}
	return pl.Explain(backend, pr, errText)
}

// For is the backend a spec names: the node's default, gVisor for a plugin raised
// to it (probed to work), or none for an unsandboxed target.
func (r *Result) For(name string) (sandbox.Backend, error) {
	if name == policy.BackendNone {
		return sandbox.Direct{}, nil
	}
	if b, ok := r.Works[name]; ok {
		return b, nil
	}
	for _, b := range r.pl.Backends {
		if b.Name() == name {
			return b, nil
		}
	}
	return nil, fmt.Errorf("sandbox backend %s: %w", name, sandbox.ErrUnavailable)
}

// Later probes a backend left unprobed, when what is about to start turns out to
// need it (a plugin raised to gVisor), and reports whether it works.
func (r *Result) Later(ctx context.Context, name string) bool {
	b, ok := r.unprobed[name]
	if !ok {
		return false
	}
	delete(r.unprobed, name)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pr := b.Probe(pctx)
	r.cache.record(pr)
	r.cache.save()
	ap := api.BackendProbe{Name: name, Works: pr.Works, Version: pr.Version, Gaps: pr.Gaps}
	if pr.Err != nil {
		ap.Error = pr.Err.Error()
	}
	r.Probes = append(r.Probes, ap)
	if pr.Works {
		r.Works[name] = b
	}
	_, r.GVisor = r.Works[policy.BackendGVisor]
	return pr.Works
}

func probeError(ps []api.BackendProbe, name string) string {
	for _, p := range ps {
		if p.Name == name {
			if p.Error != "" {
				return p.Error
			}
			return "probe failed"
		}
	}
	return "not a backend of " + runtime.GOOS
}

// landlockFinding says that the node runs its sandboxes on the Landlock tier,
// why the namespace backends do not work, and what would bring them back.
func landlockFinding(whyNot []string, usernsFix string) api.Finding {
	why := "bwrap and gVisor do not work here"
	if len(whyNot) > 0 {
		why = strings.Join(whyNot, "; ")
	}
	fix := "oz0-node doctor names what stops bwrap; with it, plugins get the namespace tier back"
	if usernsFix != "" {
		fix = usernsFix + "; then plugins get the namespace tier back"
	}
	return api.Finding{Code: api.CodeLandlockTier, Severity: api.SevWarning, Subject: "node",
		Message: "sandboxes run on the Landlock tier (" + why + "): files, TCP connects (only to the egress proxy), signals and abstract sockets are confined without namespaces; status lists what this tier does not cover",
		Fix:     fix}
}

func tier0Finding(why string) api.Finding {
	return api.Finding{Code: api.CodeTier0, Severity: api.SevCritical, Subject: "node",
		Message: "tier 0: " + why + "; every plugin runs as the node's user with no plugin sandbox",
		Fix:     fixFor("") + "; oz0-node doctor names what stops each backend"}
}

func fixFor(backend string) string {
	switch {
	case runtime.GOOS == "darwin":
		return "sandbox-exec must be present and able to run a trivial profile"
	case backend == policy.BackendGVisor:
		return "install a current runsc (docs/operators.md, Install; Debian's 2022 runsc is not fit)"
	case backend == policy.BackendBwrap:
		return "install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces"
	case backend == policy.BackendLandlock:
		return "boot a kernel of 5.13 or later with Landlock among its LSMs (lsm=…,landlock)"
	}
	return "install bubblewrap (apt-get install bubblewrap) or a current runsc, or boot a kernel with Landlock (5.13+)"
}
