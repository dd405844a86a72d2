package service

import (
	"context"
	"fmt"
	"os/user"
	"path/filepath"

	ks "github.com/kardianos/service"
)

// libraryPath is where kardianos/service writes the plist: /Library/LaunchDaemons,
// or ~/Library/LaunchAgents under the account's home (not $HOME).
func (l *Launchd) libraryPath() (string, error) {
	if !l.spec.User {
		return "/Library/LaunchDaemons/" + Label + ".plist", nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("the account's home: %w", err)
	}
	return filepath.Join(u.HomeDir, "Library/LaunchAgents", Label+".plist"), nil
}

// installNew has kardianos/service write the plist (it refuses one that exists
// and runs no launchctl), then clears a disabled mark as Enable does; the job is
// bootstrapped by start, the node's.
func (l *Launchd) installNew(ctx context.Context, plist []byte) error {
	svc, err := ks.New(program{}, libraryConfig(Label, l.spec, "LaunchdConfig", plist))
	if err != nil {
		return fmt.Errorf("kardianos/service: %w", err)
	}
	if err := svc.Install(); err != nil {
		return fmt.Errorf("kardianos/service install: %w", err)
	}
	return l.Enable(ctx)
}

// uninstall is the node's (bootout, disable, remove): the library's would unload
// the job with the legacy launchctl unload.
func (l *Launchd) uninstall(context.Context) (bool, error) { return false, nil }
