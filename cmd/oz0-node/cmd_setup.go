package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/agentsetup"
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
		Short: "Give Claude Code the node's tools and hooks (its MCP entry and one hook entry per event)",
		Long: `Writes into Claude Code's settings the MCP server "oz0" (oz0-node mcp --agent-hooks) and
one hook entry per hook event (oz0-node hook), so that every installed plugin's tools and
hooks work in Claude Code, each in its plugin's sandbox.

User scope writes the hooks into ~/.claude/settings.json and the MCP server into the
top-level mcpServers of ~/.claude.json; project scope writes .claude/settings.json and
.mcp.json at the project root. What is there stays; each file changed is first copied to
FILE.oz0-backup-TIME. Running it again changes nothing; --remove takes out what it wrote.`,
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
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("setup: find the oz0-node binary: %w", err)
			}
			if real, err := filepath.EvalSymlinks(self); err == nil {
				self = real
			}
			node := agentsetup.Node{Argv: []string{self, "--data-dir", d.Root}}
			changes, err := agentsetup.Apply(files, node, remove, dryRun, time.Now())
			w := cmd.OutOrStdout()
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
			return err
		},
	}
	cc.Flags().StringVar(&scope, "scope", agentsetup.ScopeUser, "user (your Claude Code settings) or project (the project's, shared with its repository)")
	cc.Flags().StringVar(&project, "project", "", "the project root for --scope project (default: the current folder)")
	cc.Flags().BoolVar(&remove, "remove", false, "take out what setup wrote")
	cc.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, write nothing")
	c.AddCommand(cc)
	return c
}
