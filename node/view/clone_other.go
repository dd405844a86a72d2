//go:build !linux && !darwin

package view

import (
	"errors"
	"os"
)

// clone and cloneTree are not offered here; the caller copies.
func clone(out, in *os.File) error { return errNoClone }

func cloneTree(src, dst string) error { return errNoTreeClone }

// errNoClone: a file is not cloned by itself here; the caller copies it.
var errNoClone = errors.New("no file clone here")

// errNoTreeClone: the file system clones no whole trees here; the caller copies.
var errNoTreeClone = errors.New("no tree clone here")
