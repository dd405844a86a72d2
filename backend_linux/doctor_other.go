//go:build !linux

package backendlinux

import (
	"context"

	"oz0.ai/node/node/doctor"
)

// DoctorUserns knows nothing where Linux user namespaces do not exist.
func DoctorUserns() doctor.Userns {
	return doctor.Userns{MaxUserNamespaces: -1, AppArmorRestrict: -1, UnprivilegedUsernsClone: -1}
}

// DoctorCgroups: not checked on this OS.
func DoctorCgroups() doctor.Cgroups { return doctor.Cgroups{} }

// DoctorBwrapAsRoot: bwrap does not exist on this OS.
func DoctorBwrapAsRoot(context.Context) *string { return nil }

// DoctorClockSynced: unknown on this OS.
func DoctorClockSynced() int { return -1 }

// DoctorToolPath: no Linux backend exists on this OS.
func DoctorToolPath(string) string { return "" }
