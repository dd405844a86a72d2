package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/doctor"
	"oz0.ai/node/service"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check what the node needs on this machine and data folder, and how to fix each miss",
		Long: `Check, on this machine and for this data folder, what the node needs: a sandbox
backend that works (bwrap as root and as an unprivileged user, with the kernel settings
that allow user namespaces named when they do not; runsc and its probe sandbox; Landlock,
the tier where user namespaces are refused, with what it does not cover), cgroups,
the data folder's modes and owners along its path, the tenant list, the installed
service unit, the node's sockets and the clock. Each miss comes with its fix.
Exit status: 0 when the node reaches tier 1 (a working sandbox backend), 1 when it
would run at tier 0. Nothing is changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			// The probes log what they notice; the report says it, once.
			defer slog.SetDefault(slog.Default())
			slog.SetDefault(slog.New(slog.DiscardHandler))
			r := doctor.Evaluate(gatherDoctorFacts(cmd.Context(), d))
			if asJSON {
				b, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return fmt.Errorf("doctor: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
			} else {
				fmt.Fprint(cmd.OutOrStdout(), r.Text())
			}
			if r.Tier == 0 {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

// gatherDoctorFacts runs the node's own backend probes and reads the machine.
func gatherDoctorFacts(ctx context.Context, d datadir.Dir) doctor.Facts {
	root := os.Geteuid() == 0
	f := doctor.Facts{OS: runtime.GOOS, Root: root}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, b := range platformBackends() {
		pr := b.Probe(pctx)
		fb := doctor.Backend{Name: b.Name(), Path: backendlinux.DoctorToolPath(b.Name()), Version: pr.Version, Works: pr.Works, Gaps: pr.Gaps}
		if pr.Err != nil {
			fb.Err = pr.Err.Error()
		}
		f.Backends = append(f.Backends, fb)
	}
	f.BwrapAsRoot = backendlinux.DoctorBwrapAsRoot(ctx)
	f.Userns = backendlinux.DoctorUserns()
	f.Cgroups = backendlinux.DoctorCgroups()
	f.Data = doctor.GatherDataFolder(d.Root)
	f.Tenant = doctor.GatherTenantList(d.TenantList())
	f.Sockets = []doctor.Socket{doctor.GatherSocket(d.Control()), doctor.GatherSocket(d.MCP())}
	self := selfPath()
	f.Clock = doctor.GatherClock(self, backendlinux.DoctorClockSynced())
	f.Service = serviceFacts(d, self, root)
	for _, flag := range listenFlags {
		if addr := f.Service.Listen[flag]; addr != "" {
			f.Ports = append(f.Ports, doctor.GatherPort(flag, addr))
		}
	}
	return f
}

// listenFlags are the run flags that make the node listen on a TCP address.
var listenFlags = []string{"--mcp-listen", "--metrics-listen"}

func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		return r
	}
	return exe
}

// serviceFacts reads the installed unit (or launchd job): the one `service install`
// writes, else on Linux the one a package installs.
func serviceFacts(d datadir.Dir, self string, root bool) doctor.Service {
	s := doctor.Service{Self: self, SelfData: d.Root, IsDefault: d.Root == datadir.Default()}
	if runtime.GOOS != service.Linux && runtime.GOOS != service.Darwin {
		return s
	}
	s.Checked = true
	home, _ := os.UserHomeDir()
	spec := service.Spec{OS: runtime.GOOS, User: !root, Home: home}
	paths := []string{spec.Path()}
	if runtime.GOOS == service.Linux && root {
		paths = append(paths, "/lib/systemd/system/"+service.Name+".service")
	}
	s.Path = paths[0]
	for _, p := range paths {
		argv, err := installedArgv(spec, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s.Path, s.Installed = p, true
		if err != nil {
			s.ReadErr = err.Error()
			return s
		}
		if len(argv) > 0 {
			s.Binary = argv[0]
			if r, err := filepath.EvalSymlinks(argv[0]); err == nil {
				s.Binary = r
			}
		}
		s.DataDir = service.FlagValue(argv, "--data-dir")
		s.Listen = map[string]string{}
		for _, flag := range listenFlags {
			s.Listen[flag] = service.FlagValue(argv, flag)
		}
		return s
	}
	return s
}

// installedArgv is the command line of the unit or job at path.
func installedArgv(spec service.Spec, path string) ([]string, error) {
	if path == spec.Path() {
		return (&service.Installer{}).InstalledArgv(spec)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			return service.SplitExecStart(v)
		}
	}
	return nil, fmt.Errorf("%s: no ExecStart line", path)
}
