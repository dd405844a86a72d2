// Package pluginuser readies per-plugin users on a root Linux node: whether they
// work with this data folder, and the owners and modes a plugin's user needs below
// the data folder before each start (docs/promises.md §8).
package pluginuser

import (
	"errors"
	"fmt"
)

// ErrOff is returned by Prepare when per-plugin users cannot work on
// this node (not root, not Linux, or a data folder others cannot reach).
var ErrOff = errors.New("per-plugin users are off")

// UnreachableError says a path a plugin's user must read lies outside the data
// folder and out of that user's reach; the node changes nothing there, runs the
// plugin as its own user instead and says why.
type UnreachableError struct {
	Path string
	Why  string
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s is out of the plugin user's reach: %s", e.Path, e.Why)
}
