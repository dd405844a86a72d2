package install

// The steps an install (and a removal) passes, in order. A step hook
// (Options.afterStep) sees each; the tests stop a child process at one and kill it
// there to prove an interrupted install loses nothing. Production runs set none.
const (
	stepFetched   = "fetched"   // the repository is in staging
	stepStaged    = "staged"    // the plugin's files are written to staging
	stepBuilt     = "built"     // dependencies are built in staging
	stepPlaced    = "placed"    // plugins/<name>/<commit> is in place, not yet active
	stepIntent    = "intent"    // the ledger's intent line is written, current not yet switched
	stepActivated = "activated" // current switched, the ledger's closing line not yet written
	// A removal's steps.
	stepRemoveIntent = "remove-intent" // the ledger's intent line is written, nothing moved yet
	stepRemoving     = "removing"      // a removal moved the plugin aside, its closing line not yet written
)

// reached tells hook, if there is one, that a run has passed step.
func reached(hook func(step string), step string) {
	if hook != nil {
		hook(step)
	}
}
