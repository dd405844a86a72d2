package daemon

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/netrule"
)

// Why a server that keeps crashing does: the well-known causes its stderr shows
// and what the egress proxy refused it. Pure, so a crash-loop finding can carry it.

var (
	readOnlyRE = regexp.MustCompile(`(?i)read-only file system|\bEROFS\b`)
	// Playwright, Puppeteer and the Chrome DevTools server say they found no
	// browser in these ways.
	noBrowserRE = regexp.MustCompile(`(?i)could not find (google )?chrom|could not find expected browser|executable doesn't exist at \S*(chrom|firefox|webkit)|failed to launch the browser process|browser (executable )?was not found|chromium distribution .* is not found`)
	// The egress proxy answers so when a host the lists allow cannot be reached
	// (a remote server's connect error carries it).
	unreachableRE = regexp.MustCompile(`oz0 egress proxy: (\S+?)(?::\S+)? is allowed but could not be reached: (.+?)\)?$`)
	// The Docker CLI says it found no daemon so.
	noDockerRE = regexp.MustCompile(`Cannot connect to the Docker daemon|docker\.sock: connect: `)
	// Node.js says so when the script it was told to start, or a package it
	// requires, is not there; Python when a module it imports is not.
	noModuleRE   = regexp.MustCompile(`Cannot find module '([^']+)'`)
	noPyModuleRE = regexp.MustCompile(`ModuleNotFoundError: No module named '([^'.]+)`)
	// Shells, Node.js, Python, Go, env and bwrap say a command is missing in these ways.
	notFoundREs = []*regexp.Regexp{
		regexp.MustCompile(`(?:^|: )([^\s:'"]+): (?:command )?not found`),
		regexp.MustCompile(`env: [‘'"]([^’'"]+)[’'"]: No such file or directory`),
		regexp.MustCompile(`execvp ([^\s:]+): No such file or directory`),
		regexp.MustCompile(`spawn ([^\s]+) ENOENT`),
		regexp.MustCompile(`exec: "([^"]+)": executable file not found`),
		regexp.MustCompile(`can't open file '([^']+)'`),
	}
)

// crashCauses reads a crashing server's last stderr lines for causes an operator
// can act on. pluginDir is the plugin's installed folder, plugin its name. remote:
// the server is remote, so its lines are the node's own connect errors, the only
// ones trusted to say a host is allowed yet unreachable (a local tool could print
// that line to mislead).
func crashCauses(stderr []string, pluginDir, plugin string, remote bool) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, l := range stderr {
		if readOnlyRE.MatchString(l) {
			if pluginDir != "" && strings.Contains(l, pluginDir) {
				add("it wrote into its own plugin folder, which this sandbox shows read-only (a hook run on the agent's data under Seatbelt or Landlock, or an unsandboxed run's installed commit): use ${CLAUDE_PLUGIN_DATA} (its data folder) for state")
			} else {
				add("it wrote to a read-only place: a sandboxed server writes only its data folder (${CLAUDE_PLUGIN_DATA}, also its HOME) and /tmp")
			}
		}
		if m := unreachableRE.FindStringSubmatch(l); m != nil && remote {
			add(fmt.Sprintf("egress to %s is allowed, but it could not be reached (%s): the node's own network or DNS does not reach it", m[1], m[2]))
		}
		if noDockerRE.MatchString(l) {
			add(fmt.Sprintf("it runs docker, and a sandbox shows no Docker daemon socket (using it is root on the host): starting the daemon does not help; the operator can run the plugin exempt (--plugin-sandbox-exempt %s) if that is acceptable", plugin))
		}
		if m := noModuleRE.FindStringSubmatch(l); m != nil {
			switch {
			case pluginDir != "" && strings.HasPrefix(m[1], pluginDir+"/"):
				add(fmt.Sprintf("it starts %s, which the plugin as installed does not have (a build output such as dist/ that its repository does not commit: the plugin is broken as published)", strings.TrimPrefix(m[1], pluginDir+"/")))
			case !strings.HasPrefix(m[1], "/") && !strings.HasPrefix(m[1], "."):
				add(fmt.Sprintf("it requires the npm package %s, which is not installed for it: the node installs what the package.json at the plugin's root declares, and it does not declare %s there", m[1], m[1]))
			}
		}
		if m := noPyModuleRE.FindStringSubmatch(l); m != nil {
			add(fmt.Sprintf("it imports the Python module %s, which is not installed for it: the node installs what a requirements.txt or pyproject.toml at the plugin's root declares, and none there declares it", m[1]))
		}
		if noBrowserRE.MatchString(l) {
			add(fmt.Sprintf("it looked for a browser (Chrome, Chromium) and found none: the host's /opt and browser folders are not in the sandbox; the operator can show one read-only: --plugin-ro-path %s=/opt/google/chrome (or the browser's folder on this host)", plugin))
		}
		for _, re := range notFoundREs {
			if m := re.FindStringSubmatch(l); m != nil {
				add(fmt.Sprintf("command %s was not found in its sandbox: the sandbox's root is an allowlist (the system folders, the managed runtimes and the plugin's folder), not the host's; ship the command in the plugin or start it with a managed runtime", m[1]))
				break
			}
		}
	}
	return out
}

// ruleWords turns an audit rule of a refusal into the operator's words.
func ruleWords(rule string) string {
	var parts []string
	for _, r := range strings.Split(rule, "+") {
		switch r {
		case "manifest":
			parts = append(parts, "the plugin's manifest")
		case "server":
			parts = append(parts, "the server's own egress list")
		case "tenant":
			parts = append(parts, "the tenant list")
		case "address-guard":
			parts = append(parts, "the address guard")
		case "tenant-list-unreadable":
			parts = append(parts, "the unreadable tenant list")
		default:
			parts = append(parts, r)
		}
	}
	return strings.Join(parts, " and ")
}

// egressDenials are the connections the proxy refused plugin's server (or the
// plugin, for decisions not tied to a server) since a time that are still
// refused now, one line per destination and rule, most frequent first: a
// destination allowed since (a later allow) is left out, and so is a refusal
// by the tenant list alone when tenantAllows (the list as the proxy holds it
// now; nil when unknown) allows it — the operator added the line.
func egressDenials(recent []api.EgressDecision, plugin, server string, since time.Time, tenantAllows func(host string, port int) bool) []string {
	type k struct{ dest, rule string }
	mine := func(d api.EgressDecision) (time.Time, bool) {
		if d.Plugin != plugin || (d.Server != "" && d.Server != server) {
			return time.Time{}, false
		}
		t, err := time.Parse(time.RFC3339Nano, d.Time)
		return t, err != nil || !t.Before(since)
	}
	allowedAt := map[string]time.Time{}
	for _, d := range recent {
		if t, ok := mine(d); ok && d.Decision == "allow" {
			dest := fmt.Sprintf("%s:%d", d.Host, d.Port)
			if t.After(allowedAt[dest]) {
				allowedAt[dest] = t
			}
		}
	}
	count := map[k]int{}
	for _, d := range recent {
		t, ok := mine(d)
		if !ok || d.Decision != "deny" {
			continue
		}
		dest := fmt.Sprintf("%s:%d", d.Host, d.Port)
		if a, ok := allowedAt[dest]; ok && a.After(t) {
			continue
		}
		if d.Rule == "tenant" && tenantAllows != nil && tenantAllows(d.Host, d.Port) {
			continue
		}
		count[k{dest, d.Rule}]++
	}
	keys := make([]k, 0, len(count))
	for x := range count {
		keys = append(keys, x)
	}
	sort.Slice(keys, func(i, j int) bool {
		if count[keys[i]] != count[keys[j]] {
			return count[keys[i]] > count[keys[j]]
		}
		return keys[i].dest < keys[j].dest
	})
	var out []string
	for _, x := range keys {
		s := fmt.Sprintf("egress refused %s by %s", x.dest, ruleWords(x.rule))
		if n := count[x]; n > 1 {
			s += fmt.Sprintf(" (%d times)", n)
		}
		if slices.Contains(strings.Split(x.rule, "+"), "manifest") {
			host, _, _ := strings.Cut(x.dest, ":")
			s += fmt.Sprintf(" — a plugin reaches only the hosts its manifest declares (extensions.\"ai.oz0\".egress, which Claude Code manifests do not carry), so no tenant line lets it through: its author declares %s, or the operator runs it exempt (--plugin-sandbox-exempt %s)", host, plugin)
		}
		out = append(out, s)
	}
	return out
}

// explainCrash adds to a crash-loop finding the causes read from the server's
// stderr and the egress the proxy refused it within the crash window.
func (d *Daemon) explainCrash(f *api.Finding) {
	plugin, server, _ := strings.Cut(f.Subject, "/")
	dir, remote := "", false
	d.mu.Lock()
	if p := d.plugins[plugin]; p != nil {
		dir = p.Installed.Dir
		if p.Manifest != nil {
			if s := p.Manifest.Server(server); s != nil {
				remote = s.IsRemote()
			}
		}
	}
	d.mu.Unlock()
	lines, _ := d.sup.Logs(f.Subject, 20)
	why := crashCauses(lines, dir, plugin, remote)
	if d.cfg.Egress != nil {
		window := d.cfg.Supervise.CrashWindow
		if window <= 0 {
			window = 5 * time.Minute
		}
		why = append(why, egressDenials(d.cfg.Egress.Recent(500), plugin, server, time.Now().Add(-window), d.tenantAllows())...)
	}
	if len(why) > 0 {
		f.Message += "; likely cause: " + strings.Join(why, "; ")
	}
}

// tenantAllows matches host:port against the tenant list as the proxy holds it
// now; nil when the list is not in force (unreadable: everything is refused).
func (d *Daemon) tenantAllows() func(host string, port int) bool {
	lines, ok := d.cfg.Egress.Tenant()
	if !ok {
		return nil
	}
	var ps []netrule.Pattern
	for _, l := range lines {
		if p, err := netrule.ParsePattern(l); err == nil {
			ps = append(ps, p)
		}
	}
	return func(host string, port int) bool {
		return slices.ContainsFunc(ps, func(p netrule.Pattern) bool { return p.Match(host, port) })
	}
}
