package backendlinux

import "oz0.ai/node/node/sandbox"

// Linux rlimit numbers (the same on amd64 and arm64), spelled out so the OCI builder
// builds on any OS.
const (
	rlimitFsize  = 1
	rlimitCore   = 4
	rlimitNproc  = 6
	rlimitNofile = 7
)

type rlimit struct {
	name     string
	resource int
	value    uint64
}

// rlimits are the spec's limits that are rlimits. RLIMIT_NPROC counts every process
// of a uid, so it is set only for the per-plugin user.
func rlimits(s *sandbox.Spec) []rlimit {
	out := []rlimit{{"RLIMIT_CORE", rlimitCore, 0}}
	if s.Limits.OpenFiles > 0 {
		out = append(out, rlimit{"RLIMIT_NOFILE", rlimitNofile, uint64(s.Limits.OpenFiles)})
	}
	if s.Limits.FileSizeBytes > 0 {
		out = append(out, rlimit{"RLIMIT_FSIZE", rlimitFsize, uint64(s.Limits.FileSizeBytes)})
	}
	if s.PluginUser && s.Limits.Procs > 0 {
		out = append(out, rlimit{"RLIMIT_NPROC", rlimitNproc, uint64(s.Limits.Procs)})
	}
	return out
}
