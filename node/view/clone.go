package view

import "errors"

var (
	errNoClone     = errors.New("the file system clones no files")
	errNoTreeClone = errors.New("the file system clones no trees")
)
