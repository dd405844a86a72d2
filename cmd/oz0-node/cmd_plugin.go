package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/userconf"
)

func newPluginCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "plugin", Short: "Install, update, configure, list, show, remove and lint plugins"}
	c.AddCommand(newLintCmd(), newPluginInstallCmd(g), newPluginListCmd(g), newPluginShowCmd(g), newPluginRemoveCmd(g), newPluginConfigCmd(g), newPluginUpdateCmd(g))
	return c
}

func newPluginInstallCmd(g *globals) *cobra.Command {
	var o install.Options
	run := config.Flags{}
	c := &cobra.Command{
		Use:   "install SOURCE [--ref REF] [--commit SHA] [--subdir DIR] [--name N] [--private] [--by WHO]",
		Short: "Install a plugin from a git repository at a commit, or a folder as a private candidate",
		Long: `Install a plugin. SOURCE is a git URL, a local git repository, a plain folder (installed
as a private candidate) or NAME@MARKETPLACE (an entry of a Claude Code marketplace's
.claude-plugin/marketplace.json; the marketplace is a local repository, a git URL or a
GitHub owner/repo). Nothing from the plugin runs while it is fetched and checked. The
build follows --plugin-sandbox: under strict, Python dependencies come from wheels only
and npm runs without lifecycle scripts, in a build sandbox (as the plugin's user on
a root node, only the plugin's files writable, network only the package registry
through an egress proxy); anything else needs --plugin-sandbox-exempt, and then runs
as the node's user. A server started through npx, bunx, uvx or pipx run has its
package resolved here under the same rules and pinned (see plugin update). Only what a
local server or hook may use is built. The one commit is fetched (a shallow clone
installs); git submodules are left out unless --submodules; an MCPB bundle a plugin
names is fetched, pinned by SHA-256 and unpacked. What the install leaves out or cannot
check (a runtime a server needs that is not installed) it says in note: lines. The
previous commit stays active until the new one is complete; every install is recorded
in the ledger.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			o.Source = args[0]
			in, err := installWith(cmd, d, o, run)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if in.Unchanged {
				printf(out, "%s is already installed at %s; nothing changed\n", in.Name, in.Commit)
				return nil
			}
			kind := ""
			if in.Private {
				kind = " as a private candidate"
			}
			printf(out, "installed %s at %s from %s%s\nbuild: %s\n", in.Name, in.Commit, in.Source, kind, in.Build)
			printInstallRecord(out, in.Meta)
			if m, err := manifest.Load(in.Dir, manifest.Options{FirstParty: in.FirstParty}); err == nil {
				if m.RunsNothing() && m.NotRunSummary() != "" {
					printf(out, "runs here: nothing; its parts (%s) are for the agent itself\n", m.NotRunSummary())
				}
				for _, k := range m.UserConfigKeys() {
					if o := m.UserConfig[k]; o.NeedsValue() {
						printf(out, "needs a value before its servers start: %s\n", policy.ConfigCommand(in.Name, k))
					}
				}
			}
			syncAgentSettings(out, d)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Ref, "ref", "", "branch or tag to fetch (default: the repository's HEAD)")
	f.StringVar(&o.Commit, "commit", "", "install exactly this commit; --ref must reach it")
	f.StringVar(&o.Subdir, "subdir", "", "the plugin's folder inside the repository")
	f.StringVar(&o.Name, "name", "", "the plugin name expected (must match its manifest)")
	f.BoolVar(&o.Private, "private", false, "install as a private candidate: always sandboxed, never exempt")
	f.StringVar(&o.By, "by", "", "who installs, for the ledger (default: the invoking user)")
	buildFlags(c, &o, run)
	f.BoolVar(&o.FirstParty, "first-party", false, "allow the reserved ai.oz0 namespace (the platform's own plugins)")
	f.BoolVar(&o.Submodules, "submodules", false, "fetch the repository's git submodules at the commits its tree pins (http(s) only, through the install's egress proxy); without it they are left out")
	return c
}

// printInstallRecord prints what an install fetched beside the plugin's own
// files and what it left out or could not check (the record's notes).
func printInstallRecord(out io.Writer, m installed.Meta) {
	for _, s := range m.Submodules {
		printf(out, "submodule %s: %s at %s\n", s.Path, s.URL, shortCommit(s.Commit))
	}
	for _, b := range m.Bundles {
		printf(out, "bundle %s: %s %s (%s server %s), sha256 %s\n", b.Source, b.Name, b.Version, b.Type, b.Server, b.SHA256)
	}
	for _, n := range m.Notes {
		printf(out, "note: %s\n", n)
	}
}

// installWith runs one install with the build flags of `plugin install` (shared
// with `plugin update`): the mode is the running node's unless given.
func installWith(cmd *cobra.Command, d datadir.Dir, o install.Options, run config.Flags) (*installed.Plugin, error) {
	st := readNodeStatus(d)
	flags, err := config.Parse(run)
	if err != nil {
		return nil, &usageError{err}
	}
	o.Mode, o.Exemptions = flags.Mode, flags.Exemptions
	if node, ok := config.FromStatus(st); ok && st.Node.Backend != "" && !cmd.Flags().Changed("plugin-sandbox") {
		o.Mode = node.Mode // build as the running node would run it
	}
	if st != nil && st.Node.Backend != "" && st.Node.Tier == 0 {
		o.Tier0 = true // the running node has no sandbox backend: builds run as it
	}
	o.Log = pluginCLILog(cmd)
	// A signal stops the install the way an error does: the build sandbox ends and
	// is cleaned up (its runsc state, the namespace mount) before the command ends.
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if !o.Tier0 {
		o.BuildSandbox = buildSandbox(ctx, d, st)
	}
	o.AllowCIDRs = flags.AllowCIDRs
	if node, ok := config.FromStatus(st); ok && !cmd.Flags().Changed("egress-allow-cidr") {
		// The ranges the operator opened for the running node (a registry mirror on
		// a private network) hold for what its installs fetch too.
		o.AllowCIDRs = node.AllowCIDRs
	}
	return install.Install(ctx, d, o)
}

// buildFlags are the flags of `plugin install` and `plugin update` that say how
// the node builds.
func buildFlags(c *cobra.Command, o *install.Options, run config.Flags) {
	config.RegisterSome(c.Flags(), run, map[string]string{
		"plugin-sandbox":        "the mode the build follows: strict, auto or off (default: the running node's, else strict)",
		"plugin-sandbox-exempt": "let this plugin's build run package code: NAME or NAME@COMMIT; repeatable",
		"egress-allow-cidr":     "let the install's egress proxy (the build's registry, submodules, MCPB bundles) reach this range despite the SSRF guard (a mirror on a private network); repeatable (default: the running node's)",
	})
	c.Flags().StringVar(&o.PythonIndex, "python-index", "", "a Python package index (PEP 503 simple URL) strict builds may take wheels from")
}

func newPluginUpdateCmd(g *globals) *cobra.Command {
	var o install.Options
	run := config.Flags{}
	c := &cobra.Command{
		Use:   "update NAME",
		Short: "Install a plugin again from where it came from, and resolve its launcher packages again",
		Long: `Update a plugin: fetch its recorded source (and ref) again and build it, even when
the commit is the one installed, so that launcher packages (npx/bunx/uvx/pipx run)
at @latest, a range or no version move to what the registry or index offers now.
Between updates they stay pinned at what the last install resolved. Says what
changed: the commit and each launcher package's version.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			cur, err := installed.Lookup(d, args[0])
			if err != nil {
				return fmt.Errorf("plugin %s: %w", args[0], err)
			}
			o.Source, o.Ref, o.Subdir, o.Name, o.Private = cur.Source, cur.Ref, cur.Subdir, cur.Name, cur.Private
			es, _ := installed.ReadLedger(d, cur.Name)
			for i := len(es) - 1; i >= 0; i-- {
				if es[i].Phase == installed.PhaseAbandoned {
					continue // begun, never made
				}
				// A marketplace entry is updated from its marketplace, which says
				// where the plugin's files are.
				if e := es[i]; e.Commit == cur.Commit && e.Marketplace != "" {
					o.Source, o.Subdir = e.Marketplace, ""
				}
				break
			}
			o.FirstParty, o.Reresolve = cur.FirstParty, true
			if !cmd.Flags().Changed("submodules") {
				o.Submodules = len(cur.Submodules) > 0
			}
			in, err := installWith(cmd, d, o, run)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, l := range updateChanges(cur.Meta, in.Meta) {
				printf(out, "%s\n", l)
			}
			update := in.Meta
			update.Bundles = nil // updateChanges said what each bundle is now
			printInstallRecord(out, update)
			syncAgentSettings(out, d)
			return nil
		},
	}
	c.Flags().StringVar(&o.By, "by", "", "who updates, for the ledger (default: the invoking user)")
	c.Flags().BoolVar(&o.Submodules, "submodules", false, "fetch the repository's git submodules (default: as the installed commit was)")
	buildFlags(c, &o, run)
	return c
}

// updateChanges says what an update changed: the commit, and each launcher
// package's resolved version.
func updateChanges(was, now installed.Meta) []string {
	var out []string
	if was.Commit == now.Commit {
		out = append(out, fmt.Sprintf("%s: commit unchanged at %s", now.Name, shortCommit(now.Commit)))
	} else {
		out = append(out, fmt.Sprintf("%s: commit %s -> %s", now.Name, shortCommit(was.Commit), shortCommit(now.Commit)))
	}
	for _, l := range now.Launchers {
		old := was.Launch(l.Server)
		switch {
		case old == nil:
			out = append(out, fmt.Sprintf("  server %s: %s@%s (new)", l.Server, l.Package, l.Version))
		case old.Package != l.Package || old.Version != l.Version:
			out = append(out, fmt.Sprintf("  server %s: %s@%s -> %s@%s", l.Server, old.Package, old.Version, l.Package, l.Version))
		case old.Integrity != l.Integrity:
			out = append(out, fmt.Sprintf("  server %s: %s@%s, same version with other contents (%s -> %s)", l.Server, l.Package, l.Version, old.Integrity, l.Integrity))
		default:
			out = append(out, fmt.Sprintf("  server %s: %s@%s unchanged", l.Server, l.Package, l.Version))
		}
	}
	for _, l := range was.Launchers {
		if now.Launch(l.Server) == nil {
			out = append(out, fmt.Sprintf("  server %s: no longer starts through %s (was %s@%s)", l.Server, l.Launcher, l.Package, l.Version))
		}
	}
	for _, b := range now.Bundles {
		old := was.Bundle(b.Source)
		switch {
		case old == nil:
			out = append(out, fmt.Sprintf("  bundle %s: %s %s, sha256 %s (new)", b.Source, b.Name, b.Version, b.SHA256))
		case old.SHA256 != b.SHA256:
			out = append(out, fmt.Sprintf("  bundle %s: %s %s -> %s %s, sha256 %s -> %s", b.Source, old.Name, old.Version, b.Name, b.Version, old.SHA256, b.SHA256))
		default:
			out = append(out, fmt.Sprintf("  bundle %s: %s %s unchanged (sha256 %s)", b.Source, b.Name, b.Version, b.SHA256))
		}
	}
	for _, b := range was.Bundles {
		if now.Bundle(b.Source) == nil {
			out = append(out, fmt.Sprintf("  bundle %s: no longer named (was %s %s, sha256 %s)", b.Source, b.Name, b.Version, b.SHA256))
		}
	}
	return out
}

// pluginCLILog shows warnings (a wait for the install lock, leftovers that could not
// be cleaned) on stderr; the result is printed on stdout.
func pluginCLILog(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// readNodeStatus reads status.json of a running node, or nil.
func readNodeStatus(d datadir.Dir) *api.Status {
	b, err := os.ReadFile(d.Status())
	if err != nil {
		return nil
	}
	var st api.Status
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	return &st
}

func encodePluginJSON(w io.Writer, v any) error { return writeJSON(w, v) }

func newPluginListCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List installed plugins: who installed which repository at which commit, and when",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			all, errs := installed.List(d)
			out := cmd.OutOrStdout()
			if asJSON {
				res := struct {
					Plugins []*installed.Plugin `json:"plugins"`
					Errors  []string            `json:"errors,omitempty"`
				}{Plugins: all}
				if res.Plugins == nil {
					res.Plugins = []*installed.Plugin{}
				}
				for _, e := range errs {
					res.Errors = append(res.Errors, e.Error())
				}
				if err := encodePluginJSON(out, res); err != nil {
					return err
				}
			} else {
				if len(all) == 0 && len(errs) == 0 {
					fmt.Fprintln(out, "no plugins installed")
				}
				if len(all) > 0 {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tCOMMIT\tPRIVATE\tSOURCE\tINSTALLED BY\tINSTALLED AT")
					for _, in := range all {
						src := in.Source
						if in.Subdir != "" {
							src += " (" + in.Subdir + ")"
						}
						priv := "no"
						if in.Private {
							priv = "yes"
						}
						printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, shortCommit(in.Commit), priv, src, in.InstalledBy, in.InstalledAt.Format("2006-01-02 15:04:05Z"))
					}
					tw.Flush()
				}
				for _, e := range errs {
					printf(cmd.ErrOrStderr(), "oz0-node: %s\n", e)
				}
			}
			if len(errs) > 0 {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return c
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// pluginShow is what `plugin show --json` prints.
type pluginShow struct {
	Installed *installed.Plugin  `json:"installed"`
	Manifest  *manifest.Manifest `json:"manifest,omitempty"`
	Decision  *policy.Decision   `json:"decision,omitempty"`
	Assumed   string             `json:"assumed,omitempty"`
	Problem   string             `json:"problem,omitempty"`
	// Values are the keys the plugin asks the operator for, with what is set
	// (secrets redacted).
	Values []configEntry           `json:"values,omitempty"`
	Ledger []installed.LedgerEntry `json:"ledger"`
	// LedgerSkipped says which ledger lines were not read and why (torn, too
	// long); the rest of the history is shown.
	LedgerSkipped []string `json:"ledger_skipped,omitempty"`
	// LedgerOpen are operations begun whose closing line is not written yet.
	LedgerOpen []installed.LedgerEntry `json:"ledger_open,omitempty"`
	// SandboxDenials are the running node's recent Seatbelt denials of the plugin.
	SandboxDenials []api.SandboxDenial `json:"sandbox_denials,omitempty"`
	// Secrets are the plugin's secrets and where each is bound (no values).
	Secrets []api.SecretBinding `json:"secrets,omitempty"`
	// Hidden are the running node's tools of the plugin that a tenant's tool
	// rule hides (and refuses).
	Hidden []api.HiddenTool `json:"hidden_tools,omitempty"`
}

func newPluginShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	f := config.Flags{}
	c := &cobra.Command{
		Use:   "show NAME [--json]",
		Short: "Show one installed plugin: manifest, servers, decision and ledger history",
		Long: `Show one installed plugin: its manifest, servers and hooks, the decision this node
makes for it and its ledger history. The decision uses the running node's mode,
exemptions, tier and backend (from its status); flags given here replace the mode and
exemptions; when the node is not running, strict on a working backend is assumed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			st := readNodeStatus(d)
			f["data-dir"] = []string{d.Root}
			cfg, err := config.Parse(f)
			if err != nil {
				return &usageError{err}
			}
			if run, ok := config.FromStatus(st); ok && st.Node.Backend != "" {
				// Decide as the running node does, all of its configuration; a flag
				// given here replaces its value.
				changed := cmd.Flags().Changed
				mine := cfg
				cfg, cfg.DataDir = run, d.Root
				if changed("plugin-sandbox") {
					cfg.Mode = mine.Mode
				}
				if changed("plugin-sandbox-exempt") {
					cfg.Exemptions = mine.Exemptions
				}
				if changed("plugin-backend") {
					cfg.PluginBackends = mine.PluginBackends
				}
			}
			in, err := installed.Lookup(d, args[0])
			if err != nil {
				return err
			}
			res := pluginShow{Installed: in}
			if st != nil {
				for _, p := range st.Plugins {
					if p.Name == in.Name {
						res.SandboxDenials = p.SandboxDenials
						for _, sv := range p.Servers {
							res.Hidden = append(res.Hidden, sv.Hidden...)
						}
					}
				}
			}
			h, err := installed.ReadLedgerHistory(d, in.Name)
			if err != nil {
				res.Problem = err.Error()
			}
			res.Ledger, res.LedgerSkipped, res.LedgerOpen = h.Entries, h.Skipped, h.Intents
			if res.Ledger == nil {
				res.Ledger = []installed.LedgerEntry{}
			}
			n := showNodeFacts(d, cfg, st)
			res.Assumed = n.assumed
			p, err := n.node.One(in.Name)
			if err != nil {
				res.Problem = err.Error()
			} else {
				// The operator's secret values are shown redacted.
				res.Manifest, res.Decision, res.Secrets = p.Shown().Manifest, &p.Decision, p.Secrets()
				if raw, err := manifest.Load(in.Dir, manifest.Options{FirstParty: in.FirstParty}); err == nil {
					if conf, err := userconf.LoadConfig(d, in.Name); err == nil {
						res.Values = configEntries(raw, conf, in.Dir, d.Home(in.Name))
					}
				}
			}
			if asJSON {
				return encodePluginJSON(cmd.OutOrStdout(), res)
			}
			printPluginShow(cmd.OutOrStdout(), res, cfg)
			return nil
		},
	}
	fs := c.Flags()
	fs.BoolVar(&asJSON, "json", false, "print as JSON")
	config.RegisterSome(fs, f, map[string]string{
		"plugin-sandbox":        "decide for this mode: strict, auto or off (default: the running node's)",
		"plugin-sandbox-exempt": "decide with this exemption: NAME or NAME@COMMIT; repeatable (default: the running node's)",
		"plugin-backend":        "decide with a plugin raised to a stronger backend: NAME=gvisor; repeatable",
	})
	return c
}

type showFacts struct {
	node    *plan.Node
	assumed string
}

// showNodeFacts takes the tier and backend from the running node's status, or
// assumes this OS's usual backend works (saying so).
func showNodeFacts(d datadir.Dir, cfg config.Run, st *api.Status) showFacts {
	rs, _ := nodeRuntimes(d)
	if v, ok := probe.Running(st); ok {
		return showFacts{node: plan.New(d, cfg, v, rs)}
	}
	v := probe.Assume(runtime.GOOS, policy.BackendBwrap, false)
	if runtime.GOOS == "darwin" {
		v.Backend = policy.BackendSeatbelt
	}
	return showFacts{node: plan.New(d, cfg, v, rs), assumed: fmt.Sprintf("the node is not running: decision shown for tier 1 with %s (its status gives the real tier)", v.Backend)}
}

// printManifestParts lists what the node runs and what it does not: remote
// servers, parts for the agent itself, refused hooks, and the values the plugin
// asks for (secrets redacted).
func printManifestParts(w io.Writer, m *manifest.Manifest, values []configEntry) {
	if m.RunsNothing() {
		if sum := m.NotRunSummary(); sum != "" {
			printf(w, "  runs here:     nothing; its parts (%s) are for the agent itself, which reads them from the plugin's folder\n", sum)
		} else {
			printf(w, "  runs here:     nothing (no servers, no hooks)\n")
		}
	}
	for _, c := range m.NotRun {
		printf(w, "  not run:       %s (%s): for the agent itself\n", c.Kind, c.Source)
	}
	for _, h := range m.RefusedHooks {
		printf(w, "  hook refused:  %s %s (type %s): %s\n", h.Event, h.Field, h.Type, h.Reason)
	}
	for _, e := range values {
		state := "not set"
		switch {
		case e.Set:
			state = "set: " + e.Value
		case e.Default != "":
			state = "default: " + e.Default
		}
		if e.Missing {
			state += "; needed: " + policy.ConfigCommand(m.Name, e.Key)
		}
		name := e.Key
		if !e.Declared {
			name = "${" + e.Key + "}"
		}
		printf(w, "  value %s:  %s\n", name, state)
	}
}

func printPluginShow(w io.Writer, r pluginShow, cfg config.Run) {
	in := r.Installed
	printf(w, "%s at %s\n", in.Name, in.Commit)
	src := in.Source
	if in.Ref != "" {
		src += " (ref " + in.Ref + ")"
	}
	if in.Subdir != "" {
		src += " folder " + in.Subdir
	}
	printf(w, "  source:        %s\n", src)
	printf(w, "  private:       %v\n", in.Private)
	printf(w, "  installed:     %s by %s (mode %s)\n", in.InstalledAt.Format("2006-01-02 15:04:05Z"), in.InstalledBy, in.Mode)
	printf(w, "  build:         %s\n", in.Build)
	for _, l := range in.Launchers {
		printf(w, "  launcher:      %s\n", l)
	}
	for _, s := range in.Submodules {
		printf(w, "  submodule:     %s: %s at %s\n", s.Path, s.URL, shortCommit(s.Commit))
	}
	for _, b := range in.Bundles {
		printf(w, "  bundle:        %s: %s %s (%s server %s), sha256 %s\n", b.Source, b.Name, b.Version, b.Type, b.Server, b.SHA256)
	}
	for _, n := range in.Notes {
		printf(w, "  note:          %s\n", n)
	}
	printf(w, "  files:         %s\n", in.Dir)
	if m := r.Manifest; m != nil {
		printf(w, "\nmanifest %s (%s layout)\n", m.File, m.Layout)
		printf(w, "  id:            %s %s\n", m.ID(), m.Version)
		if m.Description != "" {
			printf(w, "  description:   %s\n", m.Description)
		}
		if m.Author != "" {
			printf(w, "  author:        %s\n", m.Author)
		}
		if len(m.Egress) == 0 {
			printf(w, "  egress:        none\n")
		}
		for _, e := range m.Egress {
			printf(w, "  egress:        %s %v %s\n", e.Host, e.Ports, e.Reason)
		}
		printf(w, "  hooks:         %d\n", len(m.Hooks))
		printManifestParts(w, m, r.Values)
		printSecrets(w, "  ", r.Secrets)
	}
	if r.Decision != nil {
		dec := r.Decision
		printf(w, "\ndecision (--plugin-sandbox %s)\n", cfg.Mode)
		if r.Assumed != "" {
			printf(w, "  note: %s\n", r.Assumed)
		}
		if dec.Refused != "" {
			printf(w, "  REFUSED: %s\n", dec.Refused)
		}
		printf(w, "  user:          %s (%s)\n", dec.User, dec.User.Why)
		printf(w, "  build:         package code %v: %s\n", dec.Build.PackageCode, dec.Build.Reason)
		for _, t := range dec.Servers {
			s := r.Manifest.Server(t.Name)
			if s != nil && s.IsRemote() {
				// The server's egress entry is its URL's host, taken from the
				// operator's values (the URL shown may hold them redacted).
				host := "(not known until its values are set)"
				if len(s.Egress) == 1 && len(s.Egress[0].Ports) == 1 {
					host = net.JoinHostPort(s.Egress[0].Host, strconv.Itoa(s.Egress[0].Ports[0]))
				}
				printf(w, "  server %s: remote %s at %s: %s, no sandbox (no plugin code runs), through the egress proxy\n", t.Name, s.Remote.Type, host, t.Action)
			} else {
				cmdline := ""
				if s != nil {
					cmdline = strings.Join(append([]string{s.Command}, s.Args...), " ")
				}
				printf(w, "  server %s: %s, backend %s, network %s, %s\n    command: %s\n", t.Name, t.Action, t.Backend, t.Network, t.User, cmdline)
			}
			for _, why := range t.Reasons {
				printf(w, "    - %s\n", why)
			}
		}
		for _, f := range dec.Findings {
			printf(w, "  finding %s [%s] %s: %s\n", f.Code, f.Severity, f.Subject, f.Message)
			if f.Fix != "" {
				printf(w, "    fix: %s\n", f.Fix)
			}
		}
	}
	if len(r.Hidden) > 0 {
		printf(w, "\ntools the tenant's tool rules hide (and refuse)\n")
		for _, h := range r.Hidden {
			printf(w, "  %s: %s\n", h.Tool, h.Rule)
		}
	}
	if r.Problem != "" {
		printf(w, "\nproblem: %s\n", r.Problem)
	}
	if len(r.SandboxDenials) > 0 {
		printf(w, "\nrecent sandbox denials\n")
		for _, d := range r.SandboxDenials {
			printf(w, "  %s  %s %s  (%s[%d])\n", d.Time, d.Operation, d.Target, d.Process, d.PID)
		}
	}
	printf(w, "\nledger\n")
	for _, e := range r.Ledger {
		what := e.Commit
		if e.Action == installed.ActionRemove {
			what = e.Previous
		}
		line := fmt.Sprintf("  %s  %-7s %s by %s", lineArgs([]any{e.Time.Format("2006-01-02 15:04:05Z"), e.Action, shortCommit(what), e.Who})...)
		if e.Source != "" {
			line += " from " + e.Source
		}
		if e.Mode != "" {
			line += " (mode " + e.Mode + ")"
		}
		if e.Phase != "" {
			line += " [" + e.Phase + "]"
		}
		printf(w, "%s\n", line)
		if e.Phase != "" && len(e.Notes) > 0 {
			printf(w, "    %s\n", e.Notes[len(e.Notes)-1])
		}
	}
	for _, e := range r.LedgerOpen {
		printf(w, "  %s  %-7s %s by %s: begun, not yet recorded as made (the next install, removal or node start closes it)\n", lineArgs([]any{e.Time.Format("2006-01-02 15:04:05Z"), e.Action, shortCommit(e.Commit), e.Who})...)
	}
	for _, s := range r.LedgerSkipped {
		printf(w, "  ledger %s\n", s)
	}
}

func newPluginRemoveCmd(g *globals) *cobra.Command {
	var yes bool
	var by string
	c := &cobra.Command{
		Use:   "remove NAME [--yes]",
		Short: "Remove a plugin's files and home (a running node stops its servers)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			name := args[0]
			in, lerr := installed.Lookup(d, name)
			if errors.Is(lerr, installed.ErrNotInstalled) {
				if _, err := os.Stat(d.Plugin(name)); err != nil {
					return lerr
				}
			}
			if !yes {
				fi, err := os.Stdin.Stat()
				if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
					return usagef("plugin remove %s: no terminal to ask on; pass --yes to remove its files and home", name)
				}
				what := name
				if in != nil {
					what = fmt.Sprintf("%s (%s from %s)", name, shortCommit(in.Commit), in.Source)
				}
				printf(cmd.OutOrStdout(), "Remove plugin %s, its files and its home %s? [y/N] ", what, d.Home(name))
				line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return &exitError{code: exitFailure, msg: "not removed"}
				}
			}
			if _, err := install.Remove(cmd.Context(), d, install.RemoveOptions{Name: name, By: by, Log: pluginCLILog(cmd)}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", name)
			if _, err := os.Stat(d.Control()); err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "the running node stops its servers when it reconciles (SIGHUP)\n")
			}
			syncAgentSettings(cmd.OutOrStdout(), d)
			return nil
		},
	}
	c.Flags().BoolVar(&yes, "yes", false, "remove without asking")
	c.Flags().StringVar(&by, "by", "", "who removes, for the ledger (default: the invoking user)")
	return c
}

func newLintCmd() *cobra.Command {
	var asJSON, firstParty bool
	c := &cobra.Command{
		Use:   "lint PATH",
		Short: "Check a plugin folder: errors name the file and field; warnings say what the operator must do",
		Long: `Check a plugin folder without running anything from it. Errors name the file and the
field; warnings cover sandbox: host and sandbox: own servers (refused unless the operator
exempts the plugin), missing reason strings, broad leading-dot egress entries, and hook
timeouts above the node's cap (60 s).
Exits 1 on any error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, diags := manifest.Lint(args[0], manifest.Options{FirstParty: firstParty})
			errs := 0
			for _, d := range diags {
				if d.Severity == manifest.SevError {
					errs++
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				res := struct {
					OK          bool                  `json:"ok"`
					Plugin      string                `json:"plugin,omitempty"`
					Diagnostics []manifest.Diagnostic `json:"diagnostics"`
				}{OK: errs == 0, Diagnostics: diags}
				if res.Diagnostics == nil {
					res.Diagnostics = []manifest.Diagnostic{}
				}
				if m != nil {
					res.Plugin = m.ID()
				}
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				for _, d := range diags {
					printf(out, "%s\n", d.String())
				}
				if m != nil {
					printf(out, "%s %s: ok (%d servers, %d hooks, %d warnings)\n", m.ID(), m.Version, len(m.Servers), len(m.Hooks), len(diags))
				}
			}
			if errs > 0 {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %d errors", args[0], errs)}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	c.Flags().BoolVar(&firstParty, "first-party", false, "allow the reserved ai.oz0 namespace (the platform's own plugins)")
	return c
}
