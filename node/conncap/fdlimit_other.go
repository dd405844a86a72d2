//go:build !linux && !darwin

package conncap

// descriptorLimit is a conservative open-file limit where the node cannot ask.
func descriptorLimit() int { return 1024 }
