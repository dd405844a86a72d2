package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/datadir"
)

// version is stamped at release time with -ldflags "-X main.version=…".
var version = "dev"

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}

type globals struct {
	dataDir string
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "oz0-node",
		Short: "Run agent plugins' MCP servers and hooks, each in a sandbox of its own",
		Long: `oz0-node is the per-machine node of the oz0 agent platform. It installs plugins
(a git repository at a commit), runs each plugin's MCP servers and hooks in a sandbox of
the plugin's own (bubblewrap or gVisor on Linux, Seatbelt on macOS), lets them reach the
network only through its egress proxy, and reports what runs, how it is isolated, what is
exempt and what is wrong.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", datadir.Default(),
		"the node's data folder (env "+datadir.EnvVar+")")
	root.AddCommand(
		newRunCmd(g),
		newStatusCmd(g),
		newFindingsCmd(g),
		newPluginCmd(g),
		newExecCmd(g),
		newSandboxCmd(g),
		newCallCmd(g),
		newRestartCmd(g),
		newLogsCmd(g),
		newAuditCmd(g),
		newApprovalsCmd(g),
		newApproveCmd(g),
		newDenyCmd(g),
		newMCPCmd(g),
		newHookCmd(g),
		newSetupCmd(g),
		newTUICmd(g),
		newDoctorCmd(g),
		newServiceCmd(g),
		newVersionCmd(),
	)
	for _, c := range root.Commands() {
		wrapArgs(c)
		groupsRejectUnknown(c)
	}
	return root
}

// groupsRejectUnknown makes a command group (plugin, service, sandbox) answer an
// unknown subcommand with a usage error instead of printing help and exiting 0.
func groupsRejectUnknown(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
	for _, s := range c.Commands() {
		groupsRejectUnknown(s)
	}
}

// wrapArgs makes argument-count errors usage errors (exit 2) throughout the tree.
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &usageError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
			}
			return nil
		}
	}
	for _, s := range c.Commands() {
		wrapArgs(s)
	}
}

func (g *globals) dir() (datadir.Dir, error) {
	d, err := datadir.New(g.dataDir)
	if err != nil {
		return datadir.Dir{}, &usageError{err}
	}
	return d, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the node's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "oz0-node", versionString())
			return nil
		},
	}
}
