package install

// The steps an install (and a removal) passes, in order. A step hook
// (Options.afterStep) sees each; the tests stop a child process at one and kill it
// there to prove an interrupted install loses nothing. Production runs set none.
const (
	stepFetched   = "fetched"   // the repository is in staging
	stepStaged    = "staged"    // the plugin's files are written to staging
	stepBuilt     = "built"     // dependencies are built in staging
	stepPlaced    = "placed"    // plugins/<name>/<commit> is in place, not yet active
	stepActivated = "activated" // current switched, ledger not yet written
	stepRemoving  = "removing"  // a removal moved the plugin aside
)

// reached tells hook, if there is one, that a run has passed step.
func reached(hook func(step string), step string) {
	if hook != nil {
		hook(step)
	}
}
