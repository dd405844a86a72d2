package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/manifest"
)

func newPluginCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "plugin", Short: "Install, list, show, remove and lint plugins"}
	c.AddCommand(newLintCmd(), &cobra.Command{
		Use:   "install SOURCE [--ref REF] [--commit SHA] [--subdir DIR] [--name N] [--private] [--by WHO]",
		Short: "Install a plugin from a git repository at a commit, or a folder as a private candidate",
		Args:  cobra.ExactArgs(1),
		RunE:  func(*cobra.Command, []string) error { return notYet("oz0-node plugin install") },
	}, &cobra.Command{
		Use:   "list",
		Short: "List installed plugins: who installed which repository at which commit, and when",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return notYet("oz0-node plugin list") },
	}, &cobra.Command{
		Use:   "show NAME",
		Short: "Show one installed plugin: manifest, decision and ledger history",
		Args:  cobra.ExactArgs(1),
		RunE:  func(*cobra.Command, []string) error { return notYet("oz0-node plugin show") },
	}, &cobra.Command{
		Use:   "remove NAME [--yes]",
		Short: "Stop a plugin's servers and remove its files and home",
		Args:  cobra.ExactArgs(1),
		RunE:  func(*cobra.Command, []string) error { return notYet("oz0-node plugin remove") },
	})
	return c
}

func newLintCmd() *cobra.Command {
	var asJSON, firstParty bool
	c := &cobra.Command{
		Use:   "lint PATH",
		Short: "Check a plugin folder: errors name the file and field; warnings say what the operator must do",
		Long: `Check a plugin folder without running anything from it. Errors name the file and the
field; warnings cover sandbox: host and sandbox: own servers (refused unless the operator
exempts the plugin), missing reason strings, and broad leading-dot egress entries.
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
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				for _, d := range diags {
					fmt.Fprintln(out, d.String())
				}
				if m != nil {
					fmt.Fprintf(out, "%s %s: ok (%d servers, %d hooks, %d warnings)\n", m.ID(), m.Version, len(m.Servers), len(m.Hooks), len(diags))
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
