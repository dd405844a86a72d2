//go:build !linux && !darwin

package service

// Native returns this OS's service manager for a spec: none is supported here.
func Native(s Spec, uid int) Manager {
	return unavailable{s.OS, "oz0-node installs services only on Linux (systemd) and macOS (launchd)"}
}
