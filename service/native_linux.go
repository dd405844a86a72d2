package service

// Native returns this OS's service manager for a spec.
func Native(s Spec, uid int) Manager {
	if s.OS == Darwin {
		return unavailable{"launchd", "launchd runs only on macOS"}
	}
	return NewSystemd(s)
}
