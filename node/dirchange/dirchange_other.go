//go:build !linux

package dirchange

// Watch is not available on this system: every caller reads its inputs again.
type Watch struct{}

// New returns ErrUnsupported.
func New() (*Watch, error) { return nil, ErrUnsupported }

// Add returns ErrUnsupported.
func (w *Watch) Add(parents, folders []string) error { return ErrUnsupported }

// Gen reports no generation: changes are not watched.
func (w *Watch) Gen() (uint64, bool) { return 0, false }

// Close does nothing.
func (w *Watch) Close() error { return nil }
