//go:build !linux

package install

import "os"

// exchangeDirs swaps two folders. Without an atomic exchange here it takes three
// renames; a crash between them leaves b missing until the next install.
func exchangeDirs(a, b string) error {
	tmp := a + ".swap"
	if err := os.Rename(b, tmp); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		os.Rename(tmp, b)
		return err
	}
	return os.Rename(tmp, a)
}
