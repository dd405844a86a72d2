// Package backendlinux runs plugin sandboxes on Linux: bubblewrap (an argv built from
// a sandbox.Spec, run after a switch to the plugin's user) and gVisor (an OCI bundle
// run with runsc). The builders are pure and OS-neutral so `oz0-node sandbox show`
// works anywhere; the runners and probes live in the _linux.go files.
package backendlinux
