// Package service installs the node as a systemd unit or a launchd job. Rendering
// the unit and the plist is pure (both are tested on any OS); installing writes them
// under a root folder that tests redirect, and asks the service manager to act.
package service

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"strings"

	"howett.net/plist"

	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
)

// Names the service goes by.
const (
	// Name is the systemd unit's name (oz0-node.service) and the logs' folder.
	Name = "oz0-node"
	// Label is the launchd job label.
	Label = "ai.oz0.node"
	// Description is shown by systemctl status.
	Description = "oz0-node: runs agent plugins' MCP servers, each in a sandbox of its own"
	// SystemDataDir is the root node's default data folder on Linux; only there is it
	// systemd's StateDirectory.
	SystemDataDir = datadir.LinuxSystem
)

// OS names the service managers: linux is systemd, darwin is launchd.
const (
	Linux  = "linux"
	Darwin = "darwin"
)

// Spec is everything a unit or a plist depends on.
type Spec struct {
	OS string // linux or darwin
	// User selects a per-user service (systemd --user, a LaunchAgent) instead of a
	// system one (a system unit, a LaunchDaemon).
	User bool
	// Home is the user's home folder; it places user services' files and logs.
	Home string
	// Binary is the absolute path of the oz0-node executable.
	Binary string
	// Run is the validated run configuration (config.Parse); its canonical flags
	// go on the command line.
	Run config.Run
}

// File is one file install writes: its absolute path on the target machine, its
// mode and content, and folders that must exist beside it (launchd's logs).
type File struct {
	Path string
	Mode os.FileMode
	Data []byte
	// Dirs are created (mode 0700) before the service starts.
	Dirs []string
}

// FileMode of unit files and plists: launchd refuses a LaunchDaemon plist that is
// writable by others or not owned by root:wheel.
const FileMode = 0o644

// Validate checks what config.Parse cannot: the OS, the binary and home paths.
func (s Spec) Validate() error {
	switch s.OS {
	case Linux, Darwin:
	default:
		return fmt.Errorf("service for %q: only linux (systemd) and darwin (launchd) are supported", s.OS)
	}
	if !path.IsAbs(s.Binary) || path.Clean(s.Binary) != s.Binary {
		return fmt.Errorf("service: the node binary %q must be an absolute, clean path", s.Binary)
	}
	if s.User && (!path.IsAbs(s.Home) || path.Clean(s.Home) != s.Home || s.Home == "/") {
		return fmt.Errorf("service: a user service needs the user's home folder, got %q", s.Home)
	}
	if s.Run.DataDir != "" && !path.IsAbs(s.Run.DataDir) {
		return fmt.Errorf("service: --data-dir %q must be an absolute path (the service does not start in this folder)", s.Run.DataDir)
	}
	for _, a := range s.Argv() {
		if strings.ContainsAny(a, "\x00\n\r") {
			return fmt.Errorf("service: argument %q contains a control character", a)
		}
	}
	return nil
}

// Argv is the service's command line: the binary, `run`, and the canonical flags.
func (s Spec) Argv() []string {
	return append([]string{s.Binary, "run"}, s.Run.Args()...)
}

// Path is where the unit or plist lives on the target machine.
func (s Spec) Path() string {
	switch {
	case s.OS == Linux && s.User:
		return path.Join(s.Home, ".config/systemd/user", Name+".service")
	case s.OS == Linux:
		return "/etc/systemd/system/" + Name + ".service"
	case s.User:
		return path.Join(s.Home, "Library/LaunchAgents", Label+".plist")
	}
	return "/Library/LaunchDaemons/" + Label + ".plist"
}

// LogDir is where launchd writes the node's stdout and stderr (systemd sends them
// to the journal).
func (s Spec) LogDir() string {
	if s.User {
		return path.Join(s.Home, "Library/Logs", Name)
	}
	return "/Library/Logs/" + Name
}

// Render returns the file install writes for s.
func Render(s Spec) (File, error) {
	if err := s.Validate(); err != nil {
		return File{}, err
	}
	f := File{Path: s.Path(), Mode: FileMode}
	var err error
	if s.OS == Linux {
		f.Data, err = RenderSystemd(s)
	} else {
		f.Data, err = RenderLaunchd(s)
		f.Dirs = []string{s.LogDir()}
	}
	return f, err
}

// systemdUnit is the unit, the node's own: a umask, KillMode and a restart policy
// that gives up.
// Restart back-off: 5 s between tries; after 10 failed starts in 10 minutes systemd
// gives up and `service status` reports failed, rather than loop forever.
// Type=notify: the node says READY=1 once its control socket, proxy and first
// reconcile are up, and pings the watchdog at half of WatchdogSec; a node that hangs
// is killed and restarted. Exit codes (cmd/oz0-node/main.go): 0 stopped on request,
// 1 failed (restart), 2 usage error (a restart cannot fix the flags: no restart).
const systemdUnit = `# Written by oz0-node service install; "oz0-node service unit" prints it.
# Changes here are replaced on the next install: pass run flags to install instead.
[Unit]
Description={{description}}
{{network}}StartLimitIntervalSec=600
StartLimitBurst=10

[Service]
Type=notify
NotifyAccess=main
WatchdogSec=30s
ExecStart={{execstart}}
# Files the node creates are private unless it says otherwise.
UMask=0077
Restart=on-failure
RestartPreventExitStatus=2
RestartSec=5s
# SIGTERM to the node only; it stops its sandboxes, and whatever is left of the
# cgroup (plugin processes included) is killed after TimeoutStopSec.
KillMode=mixed
TimeoutStopSec=30s
{{state}}
[Install]
WantedBy={{wantedby}}
`

// RenderSystemd renders the systemd unit.
func RenderSystemd(s Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var exec []string
	for _, a := range s.Argv() {
		exec = append(exec, systemdQuote(a))
	}
	network, state, wanted := "", "", "default.target"
	if !s.User {
		// A user manager cannot order itself after a system target.
		network = "Wants=network-online.target\nAfter=network-online.target\n"
		wanted = "multi-user.target"
		if s.Run.DataDir == SystemDataDir {
			// systemd creates /var/lib/oz0-node; 0711 lets plugin users traverse it
			// (docs/architecture.md) and systemd resets the mode at each start.
			state = "StateDirectory=" + Name + "\nStateDirectoryMode=0711\n"
		}
	}
	r := strings.NewReplacer(
		"{{description}}", Description,
		"{{network}}", network,
		"{{execstart}}", strings.Join(exec, " "),
		"{{state}}", state,
		"{{wantedby}}", wanted,
	)
	return []byte(r.Replace(systemdUnit)), nil
}

// systemdQuote writes one ExecStart argument so systemd reads it back unchanged:
// specifiers (%) and variables ($) escaped, quotes around anything unusual.
func systemdQuote(a string) string {
	plain := a != ""
	for _, c := range a {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/-_.,:=@+", c)) {
			plain = false
		}
	}
	if plain {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range a {
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case '%':
			b.WriteString("%%")
		case '$':
			b.WriteString("$$")
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// LaunchdJob is the plist's content. Field order is the file's key order.
type LaunchdJob struct {
	Label            string         `plist:"Label"`
	ProgramArguments []string       `plist:"ProgramArguments"`
	RunAtLoad        bool           `plist:"RunAtLoad"`
	KeepAlive        map[string]any `plist:"KeepAlive"`
	// ThrottleInterval is the back-off between restarts, in seconds.
	ThrottleInterval int `plist:"ThrottleInterval"`
	// ExitTimeOut is how long launchd waits after SIGTERM before SIGKILL.
	ExitTimeOut       int    `plist:"ExitTimeOut"`
	Umask             int    `plist:"Umask"`
	ProcessType       string `plist:"ProcessType"`
	StandardOutPath   string `plist:"StandardOutPath"`
	StandardErrorPath string `plist:"StandardErrorPath"`
}

// Umask 077 in the decimal launchd reads.
const launchdUmask = 0o077

// Job is the launchd job for s.
func Job(s Spec) LaunchdJob {
	return LaunchdJob{
		Label:            Label,
		ProgramArguments: s.Argv(),
		RunAtLoad:        true,
		// Keyed on the node's exit codes: 0 (stopped on request) stays stopped; any
		// other code (1 failed, 2 usage) or a crash restarts, throttled. launchd has
		// no key to exempt one code, unlike systemd's RestartPreventExitStatus.
		KeepAlive:         map[string]any{"SuccessfulExit": false, "Crashed": true},
		ThrottleInterval:  5,
		ExitTimeOut:       30,
		Umask:             launchdUmask,
		ProcessType:       "Standard",
		StandardOutPath:   path.Join(s.LogDir(), Name+".out.log"),
		StandardErrorPath: path.Join(s.LogDir(), Name+".err.log"),
	}
}

// RenderLaunchd renders the launchd plist (XML).
func RenderLaunchd(s Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := plist.NewEncoderForFormat(&b, plist.XMLFormat)
	enc.Indent("\t")
	if err := enc.Encode(Job(s)); err != nil {
		return nil, fmt.Errorf("encode launchd plist: %w", err)
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}
