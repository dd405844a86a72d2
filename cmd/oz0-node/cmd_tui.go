package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// tuiBinaryName is the terminal UI's own binary, installed beside oz0-node.
const tuiBinaryName = "oz0-node-tui"

// tuiBinary finds oz0-node-tui next to this binary, else on PATH.
func tuiBinary() (string, error) {
	self, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(self); err == nil {
			self = r
		}
		cand := filepath.Join(filepath.Dir(self), tuiBinaryName)
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	if p, err := exec.LookPath(tuiBinaryName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the terminal UI is a binary of its own, %s, and it is neither next to %s nor on PATH (build it with: go build -o %s ./cmd/oz0-node-tui)",
		tuiBinaryName, self, filepath.Join(filepath.Dir(self), tuiBinaryName))
}

func newTUICmd(g *globals) *cobra.Command {
	var noColor bool
	c := &cobra.Command{
		Use:   "tui",
		Short: "Open the live terminal UI: plugins, findings, exemptions, egress",
		Long: `Open the live terminal UI on the running node's control socket (<data>/run/control.sock).
It follows the node's event stream, so changes show as they happen, and reconnects
with back-off when the node goes away. Views: 1 plugins, 2 findings, 3 exemptions,
4 egress, 5 a followed server log; '?' lists every key. NO_COLOR (or --no-color)
draws plain text. The UI is the binary oz0-node-tui, installed beside oz0-node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			bin, err := tuiBinary()
			if err != nil {
				return err
			}
			argv := []string{tuiBinaryName, "--data-dir", d.Root}
			if noColor {
				argv = append(argv, "--no-color")
			}
			// Replace this process: the UI owns the terminal, its signals and exit code.
			return fmt.Errorf("run %s: %w", bin, syscall.Exec(bin, argv, os.Environ()))
		},
	}
	c.Flags().BoolVar(&noColor, "no-color", false, "draw plain text without colour (as NO_COLOR does)")
	return c
}
