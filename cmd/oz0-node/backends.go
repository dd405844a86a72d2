package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/doctor"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// tierResult is what the probe found: the node's default backend, the tier, and
// every backend that works (by name).
type tierResult struct {
	Backend  string
	Tier     int
	GVisor   bool
	Works    map[string]sandbox.Backend
	Probes   []api.BackendProbe
	Findings []api.Finding
	// Unprobed are backends neither probed now nor known from the cache: a
	// short-lived command that turns out to need one probes it then (probeLater).
	Unprobed map[string]sandbox.Backend
	cache    *probeCache
}

// probeBackends runs a trivial sandbox with each of this OS's backends and picks the
// node's default. auto prefers bwrap (start latency), then gVisor, then Seatbelt; an
// explicitly requested backend that does not work fails closed; none working is
// tier 0 with its finding.
func probeBackends(ctx context.Context, requested string) (*tierResult, error) {
	return probeWith(ctx, requested, nil)
}

// cachedBackends is probeBackends for commands that start one sandbox (exec,
// hooks): a backend the data folder's cache knows to work under the current key is
// not probed again, `--backend B` probes only B, and auto probes in order of
// preference only until one works. What it probes it records.
func cachedBackends(ctx context.Context, d datadir.Dir, requested string) (*tierResult, error) {
	return probeWith(ctx, requested, loadProbeCache(d))
}

// probeWith probes as the cache allows: nil or refreshing, every backend for real.
func probeWith(ctx context.Context, requested string, pc *probeCache) (*tierResult, error) {
	r := &tierResult{Works: map[string]sandbox.Backend{policy.BackendNone: sandbox.Direct{}}, Unprobed: map[string]sandbox.Backend{}, cache: pc}
	if requested == policy.BackendNone {
		r.Backend = policy.BackendNone
		r.Findings = append(r.Findings, tier0Finding("--backend none was given"))
		return r, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var whyNot []string // per backend that does not work, why (for the tier-0 finding)
	var usernsFix string
	found := false // a backend auto would take works (platformBackends is in auto's order)
	for _, b := range platformBackends() {
		if cp, ok := pc.cached(b.Name()); ok {
			r.Works[b.Name()] = b
			r.Probes = append(r.Probes, api.BackendProbe{Name: b.Name(), Works: true, Version: cp.Version})
			found = true
			continue
		}
		if pc != nil && !pc.refresh && (requested == "auto" && found || requested != "auto" && requested != b.Name()) {
			r.Unprobed[b.Name()] = b
			continue
		}
		pr := b.Probe(pctx)
		pc.record(pr)
		ap := api.BackendProbe{Name: b.Name(), Works: pr.Works, Version: pr.Version}
		if pr.Err != nil {
			ap.Error = pr.Err.Error()
		}
		r.Probes = append(r.Probes, ap)
		why := ap.Error
		if cause, fix := usernsCause(b.Name(), pr, ap.Error); cause != "" {
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
			if cause, fix := usernsCause(b.Name(), pr, ap.Error); cause != "" {
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
	for _, name := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendSeatbelt} {
		if _, ok := r.Works[name]; ok {
			r.Backend, r.Tier = name, 1
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

// probeLater probes a backend left unprobed, when what is about to start turns out
// to need it (a plugin raised to gVisor), and reports whether it works.
func (r *tierResult) probeLater(ctx context.Context, name string) bool {
	b, ok := r.Unprobed[name]
	if !ok {
		return false
	}
	delete(r.Unprobed, name)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pr := b.Probe(pctx)
	r.cache.record(pr)
	r.cache.save()
	ap := api.BackendProbe{Name: name, Works: pr.Works, Version: pr.Version}
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

// usernsCause names the kernel setting that keeps an installed Linux backend from
// creating its namespaces, with its fix, as `oz0-node doctor` does ("" when the
// failure is something else).
func usernsCause(backend string, pr sandbox.Probe, errText string) (cause, fix string) {
	if runtime.GOOS != "linux" || pr.Works || pr.Version == "" || backend == policy.BackendSeatbelt {
		return "", ""
	}
	u := backendlinux.DoctorUserns()
	if backend == policy.BackendGVisor && u.MaxUserNamespaces != 0 && !strings.Contains(strings.ToLower(errText), "no space left on device") {
		return "", "" // runsc fails in many ways of its own: only a namespace limit is named
	}
	return doctor.UsernsCause(u, errText)
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
		return "install a current runsc (see the README; Debian's 2022 runsc is not fit)"
	case backend == policy.BackendBwrap:
		return "install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces"
	}
	return "install bubblewrap (apt-get install bubblewrap) or a current runsc"
}
