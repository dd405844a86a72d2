package service

// Native returns this OS's service manager for a spec.
func Native(s Spec, uid int) Manager {
	if s.OS == Linux {
		return unavailable{"systemd", "systemd runs only on Linux"}
	}
	return NewLaunchd(s, uid)
}
