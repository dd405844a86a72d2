//go:build !linux && !darwin

package view

import "os"

// clone and cloneTree are not offered here; the caller copies.
func clone(out, in *os.File) error { return errNoClone }

func cloneTree(src, dst string) error { return errNoTreeClone }
