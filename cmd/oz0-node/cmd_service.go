package main

import (
	"github.com/spf13/cobra"
)

func newServiceCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "service",
		Short: "Install and control the node as a systemd or launchd service",
	}
	rf := &runFlags{}
	install := &cobra.Command{
		Use:   "install [run flags…]",
		Short: "Install the node as a service with the given run flags (validated as run validates them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := rf.parse(g); err != nil {
				return err
			}
			return notYet("oz0-node service install")
		},
	}
	rf.add(install)
	c.AddCommand(install)
	for _, v := range []struct{ use, short string }{
		{"uninstall", "Remove the service"},
		{"start", "Start the service"},
		{"stop", "Stop the service"},
		{"restart", "Restart the service"},
		{"status", "Say what the service manager and the node's control socket report"},
	} {
		use := v.use
		c.AddCommand(&cobra.Command{
			Use: use, Short: v.short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return notYet("oz0-node service " + use) },
		})
	}
	urf := &runFlags{}
	var goos string
	unit := &cobra.Command{
		Use:   "unit [--os linux|darwin] [run flags…]",
		Short: "Print exactly the unit or plist that install would write",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := urf.parse(g); err != nil {
				return err
			}
			return notYet("oz0-node service unit")
		},
	}
	unit.Flags().StringVar(&goos, "os", "", "linux or darwin (default: this OS)")
	urf.add(unit)
	c.AddCommand(unit)
	return c
}
