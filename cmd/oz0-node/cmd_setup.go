package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/agentsetup"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/sandbox/probe"
)

func newSetupCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "setup",
		Short: "Write the node into an agent's settings",
	}
	var scope, project string
	var remove, dryRun bool
	cc := &cobra.Command{
		Use:   "claude-code [--scope user|project] [--remove] [--dry-run]",
		Short: "Give Claude Code the node's tools and hooks (its MCP entry and a hook entry for each event a plugin handles)",
		Long: `Writes into Claude Code's settings the MCP server "oz0" (oz0-node mcp --agent-hooks) and
a hook entry (oz0-node hook) for each event that an installed plugin's hook handles,
narrowed to the tools and sources those hooks match, so that every installed plugin's
tools and hooks work in Claude Code, each in its plugin's sandbox, and an event no
plugin handles costs Claude Code nothing. plugin install, update and remove keep the
hook entries in step with the plugins installed then.

User scope writes the hooks into ~/.claude/settings.json and the MCP server into the
top-level mcpServers of ~/.claude.json, naming this binary and data folder. Project
scope writes .claude/settings.json and .mcp.json at the project root, fit to commit:
the command is oz0-node as found on PATH, with --data-dir only when you name one;
Claude Code asks each user once to approve the project's MCP server. What is there
stays, byte for byte; each file changed is first copied to FILE.oz0-backup-TIME.
Running it again changes nothing; --remove takes out what it wrote.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			home, err := os.UserHomeDir()
			if err != nil && scope == agentsetup.ScopeUser {
				return fmt.Errorf("setup: find the home folder: %w", err)
			}
			if project == "" {
				if project, err = os.Getwd(); err != nil {
					return fmt.Errorf("setup: %w", err)
				}
			}
			if project, err = filepath.Abs(project); err != nil {
				return fmt.Errorf("setup: --project: %w", err)
			}
			files, err := agentsetup.FilesFor(scope, home, project)
			if err != nil {
				return &usageError{err}
			}
			w := cmd.OutOrStdout()
			var node agentsetup.Node
			if scope == agentsetup.ScopeProject {
				// Files meant to be committed name nothing of this machine: the
				// command on PATH, and the data folder only as the user named it.
				node.Argv = []string{"oz0-node"}
				if f := cmd.Flag("data-dir"); f != nil && f.Changed {
					node.Argv = append(node.Argv, "--data-dir", g.dataDir)
				}
			} else {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("setup: find the oz0-node binary: %w", err)
				}
				if real, err := filepath.EvalSymlinks(self); err == nil {
					self = real
				}
				node.Argv = []string{self, "--data-dir", d.Root}
			}
			regs, err := hookRegistrations(d)
			if err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			changes, err := agentsetup.Apply(files, node, agentsetup.Options{Hooks: regs, Remove: remove, DryRun: dryRun, Backup: true, Now: time.Now()})
			verb := ""
			if dryRun {
				verb = " (dry run: nothing written)"
			}
			for _, c := range changes {
				if len(c.Changes) == 0 {
					printf(w, "%s: unchanged%s\n", c.File, verb)
					continue
				}
				printf(w, "%s:%s\n", c.File, verb)
				for _, s := range c.Changes {
					printf(w, "  %s\n", s)
				}
				if c.Backup != "" {
					printf(w, "  backup: %s\n", c.Backup)
				}
			}
			if err != nil || dryRun {
				return err
			}
			if len(regs) == 0 && !remove {
				printf(w, "No installed plugin has hooks: no hook entry is written until one does (plugin install adds them).\n")
			}
			if err := agentsetup.SaveRecord(d.AgentSettings(), agentsetup.Record{Files: files, Argv: node.Argv}, remove); err != nil {
				printf(w, "note: plugin install and remove will not keep these hook entries in step (%v); run setup again after them\n", err)
			}
			if scope == agentsetup.ScopeProject && !remove {
				if _, err := exec.LookPath("oz0-node"); err != nil {
					printf(w, "note: oz0-node is not on PATH here; Claude Code starts it by that name\n")
				}
				printf(w, `Commit %s and %s. Claude Code asks each user of the project once, in an
interactive session here, to approve the project MCP server %q; until then "claude mcp
list" shows it as pending approval. Each user needs oz0-node on PATH and a running node.
`, rel(project, files.Settings), rel(project, files.MCP), hookrun.MCPServer)
			}
			return nil
		},
	}
	cc.Flags().StringVar(&scope, "scope", agentsetup.ScopeUser, "user (your Claude Code settings) or project (the project's, shared with its repository)")
	cc.Flags().StringVar(&project, "project", "", "the project root for --scope project (default: the current folder)")
	cc.Flags().BoolVar(&remove, "remove", false, "take out what setup wrote")
	cc.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, write nothing")
	c.AddCommand(cc)
	return c
}

func rel(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// hookRegistrations are the hook entries Claude Code needs for the installed
// plugins' hooks, with the running node's grants (--plugin-hooks-see) if one
// runs.
func hookRegistrations(d datadir.Dir) ([]agentsetup.Registration, error) {
	all, errs := installed.List(d)
	if len(all) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("list installed plugins: %v", errs[0])
	}
	cfg := execConfig(d, "auto", nodeRunning(d))
	plans, _ := plan.New(d, cfg, probe.Verdict{}, nil).Plan(all)
	var plugins []hookrun.Plugin
	for _, pl := range plans {
		plugins = append(plugins, hookrun.Plugin{Name: pl.Installed.Name, Hooks: pl.Manifest.Hooks})
	}
	return agentsetup.Registrations(plugins, cfg.HookGrants), nil
}

// syncAgentSettings keeps the hook entries of every recorded setup in step with
// the plugins installed now; called after plugin install, update and remove. A
// setup it cannot follow is said, never a failure of the command.
func syncAgentSettings(w io.Writer, d datadir.Dir) {
	recs, err := agentsetup.LoadRecords(d.AgentSettings())
	if err != nil {
		printf(w, "note: Claude Code's hook entries were not brought in step: %v\n", err)
		return
	}
	if len(recs) == 0 {
		return
	}
	regs, err := hookRegistrations(d)
	if err != nil {
		printf(w, "note: Claude Code's hook entries were not brought in step: %v\n", err)
		return
	}
	changes, errs := agentsetup.Sync(d.AgentSettings(), regs)
	for _, c := range changes {
		for _, s := range c.Changes {
			printf(w, "Claude Code settings %s: %s\n", c.File, s)
		}
	}
	for _, err := range errs {
		printf(w, "note: %v\n", err)
	}
}
