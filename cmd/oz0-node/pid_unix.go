//go:build unix

package main

import (
	"errors"
	"syscall"
)

// pidAlive says whether a process with this pid exists (signal 0 probes it).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
