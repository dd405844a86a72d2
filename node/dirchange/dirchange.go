// Package dirchange tells in one system call whether anything changed in a set
// of folders since a generation was read: the per-call policy check answers
// from its memo while its inputs' folders are unchanged, instead of reading
// each input again (docs/performance.md, issue 34).
//
// A change is seen from the moment the call that made it returned (the kernel
// queues the event before it does), so a memo taken with a generation is as
// current as reading the inputs again. What it cannot see it says: a folder on
// a file system whose changes may come from elsewhere (network, FUSE) is not
// watched, and Add refuses it.
package dirchange

import "errors"

// ErrUnsupported is returned where folders cannot be watched here (another
// system, or a file system whose changes the kernel may not hear of).
var ErrUnsupported = errors.New("folder changes cannot be watched here")
