package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/service"
)

// serviceOpts are the flags every service subcommand shares.
type serviceOpts struct {
	user   bool
	root   string
	binary string
}

func (o *serviceOpts) add(c *cobra.Command) {
	fs := c.PersistentFlags()
	fs.BoolVar(&o.user, "user", false, "a per-user service (systemd --user unit, launchd LaunchAgent); the default when not root")
	fs.StringVar(&o.root, "root", "", "write and remove files under this folder instead of / and do not ask the service manager (for packaging)")
	fs.StringVar(&o.binary, "binary", "", "the oz0-node executable the service runs (default: this one)")
}

// spec is the service for goos with the given run configuration.
func (o *serviceOpts) spec(goos string, run config.Run) (service.Spec, error) {
	bin := o.binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return service.Spec{}, fmt.Errorf("find the oz0-node executable: %w (pass --binary)", err)
		}
		if bin, err = filepath.EvalSymlinks(exe); err != nil {
			return service.Spec{}, fmt.Errorf("find the oz0-node executable: %w (pass --binary)", err)
		}
	}
	home, err := os.UserHomeDir()
	if err != nil && o.isUser() {
		return service.Spec{}, fmt.Errorf("a user service needs a home folder: %w", err)
	}
	s := service.Spec{OS: goos, User: o.isUser(), Home: home, Binary: bin, Run: run}
	if err := s.Validate(); err != nil {
		return service.Spec{}, &usageError{err}
	}
	return s, nil
}

func (o *serviceOpts) isUser() bool { return o.user || os.Geteuid() != 0 }

func (o *serviceOpts) installer(s service.Spec) *service.Installer {
	in := &service.Installer{Root: o.root, Chown: os.Geteuid() == 0 && !s.User}
	if o.root != "" {
		in.Manager = noManager{service.Native(s, os.Getuid()).Name()}
	} else {
		in.Manager = service.Native(s, os.Getuid())
	}
	return in
}

// noManager stands in for the service manager when --root redirects the files.
type noManager struct{ name string }

func (n noManager) Name() string { return n.name }
func (n noManager) Available() error {
	return fmt.Errorf("%w: --root was given, so only files are written", service.ErrNoManager)
}
func (n noManager) Reload(context.Context) error  { return n.Available() }
func (n noManager) Enable(context.Context) error  { return n.Available() }
func (n noManager) Disable(context.Context) error { return n.Available() }
func (n noManager) Start(context.Context) error   { return n.Available() }
func (n noManager) Stop(context.Context) error    { return n.Available() }
func (n noManager) Restart(context.Context) error { return n.Available() }
func (n noManager) State(context.Context) (service.State, error) {
	return service.StateUnknown, n.Available()
}

// targetDataDir is the data folder for a service on goos: the --data-dir given (or
// OZ0_DATA_DIR), else that OS's default for the service's user.
func targetDataDir(cmd *cobra.Command, g *globals, goos string, user bool) string {
	if f := cmd.Flag("data-dir"); (f != nil && f.Changed) || os.Getenv(datadir.EnvVar) != "" || goos == runtime.GOOS && user == (os.Geteuid() != 0) {
		return g.dataDir
	}
	home, _ := os.UserHomeDir()
	return datadir.DefaultFor(goos, !user, home, os.Getenv("XDG_DATA_HOME"))
}

func printResult(w io.Writer, r service.Result) {
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
}

// newServiceCmd is `service` and its subcommands, each built by one function below.
func newServiceCmd(g *globals) *cobra.Command {
	o := &serviceOpts{}
	c := &cobra.Command{
		Use:   "service",
		Short: "Install and control the node as a systemd or launchd service",
		Long: `Install and control the node as a service: a systemd unit on Linux
(/etc/systemd/system/oz0-node.service, or ~/.config/systemd/user/oz0-node.service with
--user), a launchd job on macOS (/Library/LaunchDaemons/ai.oz0.node.plist for root,
~/Library/LaunchAgents/ai.oz0.node.plist otherwise). Not root means --user.`,
	}
	o.add(c)
	c.AddCommand(serviceInstallCmd(g, o), serviceUninstallCmd(g, o))
	for _, v := range []struct{ use, short string }{
		{"start", "Start the service"},
		{"stop", "Stop the service"},
		{"restart", "Restart the service"},
	} {
		c.AddCommand(serviceControlCmd(g, o, v.use, v.short))
	}
	c.AddCommand(serviceStatusCmd(g, o), serviceUnitCmd(g, o))
	return c
}

// serviceInstallCmd is `service install`: the run flags validated as run validates
// them, then the unit or plist written and enabled.
func serviceInstallCmd(g *globals, o *serviceOpts) *cobra.Command {
	rf := &runFlags{}
	install := &cobra.Command{
		Use:   "install [run flags…]",
		Short: "Install the node as a service with the given run flags (validated as run validates them)",
		Long: `Install the node as a service running "oz0-node run" with the given flags, validated
exactly as run validates them; nothing is written when a flag is invalid. Installing the
same flags again does nothing; different flags replace the file and restart the service
if it was running. The service is enabled at boot (or login) but not started: run
oz0-node service start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.dataDir = targetDataDir(cmd, g, runtime.GOOS, o.isUser())
			run, err := rf.parse(g)
			if err != nil {
				return err
			}
			s, err := o.spec(runtime.GOOS, run)
			if err != nil {
				return err
			}
			// A service pointing into a temporary folder (go run, an unpacked
			// download) breaks at the next cleanup.
			if tmp, _ := filepath.EvalSymlinks(os.TempDir()); o.binary == "" && tmp != "" && strings.HasPrefix(s.Binary, tmp+string(filepath.Separator)) {
				return usagef("this oz0-node runs from a temporary folder (%s); install it (e.g. to /usr/local/bin) or pass --binary", s.Binary)
			}
			res, err := o.installer(s).Install(cmd.Context(), s)
			printResult(cmd.OutOrStdout(), res)
			return err
		},
	}
	rf.add(install)
	return install
}

// serviceUninstallCmd is `service uninstall`.
func serviceUninstallCmd(g *globals, o *serviceOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "uninstall",
		Short: "Stop and disable the service and remove its file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.spec(runtime.GOOS, config.Run{DataDir: g.dataDir})
			if err != nil {
				return err
			}
			res, err := o.installer(s).Uninstall(cmd.Context(), s)
			printResult(cmd.OutOrStdout(), res)
			return err
		},
	}
}

// serviceControlCmd is `service start`, `stop` or `restart` (action).
func serviceControlCmd(g *globals, o *serviceOpts, action, short string) *cobra.Command {
	return &cobra.Command{
		Use: action, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.spec(runtime.GOOS, config.Run{DataDir: g.dataDir})
			if err != nil {
				return err
			}
			if err := o.installer(s).Control(cmd.Context(), s, action); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: done\n", action)
			return nil
		},
	}
}

// serviceStatusCmd is `service status`: the service manager's word and the
// node's control socket, which is trusted when it answers.
func serviceStatusCmd(g *globals, o *serviceOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say what the service manager and the node's control socket report, and which is trusted",
		Long: `Report whether the service is installed, what the service manager says about it, and
whether the node answers on its control socket (<data>/run/control.sock, GET /v1/status).
A node that answers is running whatever the manager says, so the socket is trusted when it
answers; otherwise the manager is. Exits 1 when the node is not running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.spec(runtime.GOOS, config.Run{})
			if err != nil {
				return err
			}
			in := o.installer(s)
			// The installed service's own --data-dir says where its control socket
			// is, unless the operator named a data folder.
			if f := cmd.Flag("data-dir"); !f.Changed && os.Getenv(datadir.EnvVar) == "" {
				if argv, err := in.InstalledArgv(s); err == nil {
					if v := service.FlagValue(argv, "--data-dir"); v != "" {
						g.dataDir = v
					}
				}
			}
			d, err := g.dir()
			if err != nil {
				return err
			}
			st := in.Status(cmd.Context(), s, d.Control())
			fmt.Fprint(cmd.OutOrStdout(), st.String())
			if h := healthLine(d.Health()); h != "" {
				fmt.Fprintln(cmd.OutOrStdout(), h)
			}
			if !st.Running {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
}

// serviceUnitCmd is `service unit`: the file install would write, printed.
func serviceUnitCmd(g *globals, o *serviceOpts) *cobra.Command {
	urf := &runFlags{}
	var goos string
	unit := &cobra.Command{
		Use:   "unit [--os linux|darwin] [run flags…]",
		Short: "Print exactly the unit or plist that install would write",
		Long: `Print exactly the systemd unit (linux) or launchd plist (darwin) that install would
write for these flags, for review and for packaging; the file's path goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if goos == "" {
				goos = runtime.GOOS
			}
			if goos != service.Linux && goos != service.Darwin {
				return usagef("--os %q: must be linux or darwin", goos)
			}
			g.dataDir = targetDataDir(cmd, g, goos, o.isUser())
			run, err := urf.parse(g)
			if err != nil {
				return err
			}
			s, err := o.spec(goos, run)
			if err != nil {
				return err
			}
			f, err := service.Render(s)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "# %s (mode %04o)\n", f.Path, f.Mode)
			_, err = cmd.OutOrStdout().Write(f.Data)
			return err
		},
	}
	unit.Flags().StringVar(&goos, "os", "", "linux or darwin (default: this OS)")
	urf.add(unit)
	return unit
}
