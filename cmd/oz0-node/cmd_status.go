package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
)

// readStatus asks the running node over its control socket. When nothing answers
// the node is not running; a status.json left by a killed node is not trusted.
func readStatus(g *globals) (*api.Status, error) {
	d, err := g.dir()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := api.NewClient(d.Control()).Status(ctx)
	if errors.Is(err, api.ErrNotRunning) {
		msg := fmt.Sprintf("the node is not running (nothing answers on %s); start it with: oz0-node run --data-dir %s", d.Control(), d.Root)
		if fi, serr := os.Stat(d.Status()); serr == nil {
			msg += fmt.Sprintf(" (a status.json from %s is left; it is not current)", fi.ModTime().UTC().Format(time.RFC3339))
		}
		if h := healthLine(d.Health()); h != "" {
			msg += " (" + h + ")"
		}
		return nil, &exitError{code: exitFailure, msg: msg}
	}
	if err != nil {
		return nil, fmt.Errorf("read status from %s: %w", d.Control(), err)
	}
	return st, nil
}

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show the node: tier, backend, mode, labels, plugins and their servers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := readStatus(g)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the status model as JSON")
	return c
}

func newFindingsCmd(g *globals) *cobra.Command {
	var asJSON, reference bool
	c := &cobra.Command{
		Use:   "findings [--json] [--reference]",
		Short: "List the node's findings: severity, code, subject, message and fix",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reference {
				fmt.Fprint(cmd.OutOrStdout(), findingsReference())
				return nil
			}
			st, err := readStatus(g)
			if err != nil {
				return err
			}
			fs := append([]api.Finding(nil), st.Findings...)
			api.SortFindings(fs)
			if asJSON {
				if fs == nil {
					fs = []api.Finding{}
				}
				return writeJSON(cmd.OutOrStdout(), fs)
			}
			printFindings(cmd.OutOrStdout(), fs)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print findings as JSON")
	c.Flags().BoolVar(&reference, "reference", false, "print the reference of every finding code (Markdown), as in docs/operators.md")
	return c
}

// findingsReference renders every finding code as a Markdown table; docs/operators.md's
// reference is this output, checked by a test so it never drifts.
func findingsReference() string {
	var b strings.Builder
	b.WriteString("| code | severity | meaning |\n|---|---|---|\n")
	for _, c := range api.Codes {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", c.Code, c.Severity, c.Meaning)
	}
	return b.String()
}

func printStatus(w io.Writer, st *api.Status) {
	n := st.Node
	printf(w, "oz0-node %s  pid %d  data %s\n", n.Version, n.PID, n.DataDir)
	printf(w, "tier %d  backend %s  mode %s  plugin users: %s  health: %s\n", n.Tier, n.Backend, n.Mode, n.Users, n.Health)
	if len(n.NotCovers) > 0 {
		printf(w, "not covered: %s\n", strings.Join(n.NotCovers, "; "))
	}
	if len(n.Labels) > 0 {
		var ls []string
		for k, v := range n.Labels {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		printf(w, "labels: %s\n", strings.Join(ls, " "))
	}
	for _, e := range st.Exempt {
		printf(w, "exemption %s: %s %s\n", e.Flag, e.Matches, e.Detail)
	}
	for _, g := range st.HookGrants {
		printf(w, "hooks of %s see %s's calls (--plugin-hooks-see %s): %s\n", g.Watcher, g.Other, g.Flag, g.Detail)
	}
	printf(w, "\n")
	for _, p := range st.Plugins {
		flag := ""
		if p.Exempt {
			flag = "  EXEMPT"
		}
		if p.Private {
			flag += "  private"
		}
		if p.TLSTrustD {
			flag += "  tls-trustd"
		}
		printf(w, "%s @ %s  (%s, %s)  egress allowed %d denied %d%s\n", p.Name, short12(p.Commit), p.Backend, p.User, p.Allowed, p.Denied, flag)
		if p.Held != "" {
			printf(w, "  HELD BACK: %s\n", p.Held)
		}
		if p.HooksProject {
			printf(w, "  hooks read the agent session's project, read-only (--plugin-hooks-project %s)\n", p.Name)
		}
		for _, ro := range p.ROPaths {
			printf(w, "  sees %s read-only (--plugin-ro-path %s=%s)\n", ro, p.Name, ro)
		}
		if p.HooksApprove {
			printf(w, "  hooks speak the whole hook protocol for every tool, the agent's own included (--plugin-hooks-approve %s)\n", p.Name)
		}
		if p.HooksEgress {
			printf(w, "  hooks keep the plugin's egress when they receive the agent's data (--plugin-hooks-egress %s)\n", p.Name)
		}
		printSecrets(w, "  ", p.Secrets)
		for _, s := range p.Servers {
			if s.Remote != "" {
				printf(w, "  %-20s %-14s remote %s at %s, through the egress proxy\n", s.Name, s.State, s.Remote, s.Host)
			} else {
				ops := ""
				if s.OperatorRestarts > 0 {
					ops = fmt.Sprintf(" (+%d by the operator)", s.OperatorRestarts)
				}
				printf(w, "  %-20s %-14s %-9s net %-16s restarts %d%s\n", s.Name, s.State, s.Sandbox, s.Network, s.Restarts, ops)
			}
			if s.LastRestart != "" {
				printf(w, "    last restart: %s\n", s.LastRestart)
			}
			if s.State == api.StateRefused && len(s.Reasons) > 0 {
				printf(w, "    refused: %s\n", strings.Join(s.Reasons, "; "))
			}
			if s.LogDropped > 0 {
				printf(w, "    log: %d bytes of stderr dropped (the server flooded)\n", s.LogDropped)
			}
			if s.NotesDropped > 0 {
				printf(w, "    notifications: %d dropped (the server flooded)\n", s.NotesDropped)
			}
			for _, h := range s.Hidden {
				printf(w, "    hidden by the tenant's tool rules: %s (%s)\n", h.Tool, h.Rule)
			}
		}
		for i, d := range p.SandboxDenials {
			if i == 3 {
				printf(w, "  … %d more sandbox denials (status --json)\n", len(p.SandboxDenials)-i)
				break
			}
			printf(w, "  sandbox denied %s %s  (%s[%d], %s)\n", d.Operation, d.Target, d.Process, d.PID, d.Time)
			if d.Hint != "" {
				printf(w, "    hint: %s\n", d.Hint)
			}
		}
	}
	if len(st.Egress.Recent) > 0 {
		printf(w, "\nrecent egress denials:\n")
		for _, e := range st.Egress.Recent {
			if e.Decision == "deny" {
				printf(w, "  %s %s %s:%d  %s\n", e.Time, e.Plugin, e.Host, e.Port, e.Rule)
			}
		}
	}
	if len(st.HookRuns) > 0 {
		printf(w, "\nrecent hook runs:\n")
		for _, r := range st.HookRuns {
			net := ""
			if r.Network != "" {
				net = ", network " + r.Network
			}
			printf(w, "  %s hook %s %s %s: %s in %.2fs (%s%s)\n", r.Time, r.Plugin, r.Event, r.Tool, r.Decision, r.Seconds, r.Source, net)
			if len(r.Dropped) > 0 {
				printf(w, "    dropped, beyond the plugin's authority: %s\n", strings.Join(r.Dropped, ", "))
			}
		}
	}
	if tr := st.ToolRules; tr.Present {
		if tr.OK {
			printf(w, "\ntool rules %s: %d rules\n", tr.Path, tr.Rules)
		} else {
			printf(w, "\ntool rules %s UNUSABLE, every tool call is refused: %s\n", tr.Path, tr.Error)
		}
	}
	if len(st.Approvals) > 0 {
		printf(w, "\n%d approval(s) waiting (oz0-node approvals):\n", len(st.Approvals))
		for _, a := range st.Approvals {
			approvalText(w, a)
		}
	}
	if len(st.Findings) > 0 {
		printf(w, "\n%d findings (oz0-node findings)\n", len(st.Findings))
	}
}

func printFindings(w io.Writer, fs []api.Finding) {
	if len(fs) == 0 {
		printf(w, "no findings\n")
		return
	}
	for _, f := range fs {
		printf(w, "%-8s %-26s %s\n  %s\n", f.Severity, f.Code, f.Subject, f.Message)
		if f.Fix != "" {
			printf(w, "  fix: %s\n", f.Fix)
		}
	}
}

func short12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// healthLine says what health.json says, a dead pid read as stopped; "" when
// there is none.
func healthLine(path string) string {
	h, stale, err := api.ReadHealth(path, pidAlive)
	if err != nil {
		return ""
	}
	line := "health.json: " + h.Status
	if stale {
		line += fmt.Sprintf(" (it was not written as the node ended: its pid %d no longer runs)", h.PID)
	}
	return line
}
