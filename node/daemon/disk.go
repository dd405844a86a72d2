package daemon

import (
	"fmt"
	"time"

	"oz0.ai/node/node/api"
)

// diskRetry is how soon the node tries again a write of a file it keeps current
// (status.json, health.json) that failed.
const diskRetry = time.Second

// wrote records the outcome of a write of a file the node keeps current: a
// failure raises (or keeps) the disk finding naming the file and the error,
// kept in memory and served by the control API while the disk refuses; the
// first success afterwards clears it. It reports whether the write failed.
func (d *Daemon) wrote(path string, err error) bool {
	k := api.CodeDisk + "|" + path
	d.mu.Lock()
	_, had := d.findings[k]
	d.mu.Unlock()
	if err == nil {
		if had {
			d.mu.Lock()
			delete(d.findings, k)
			d.mu.Unlock()
			d.log.Info("writing works again", "path", path)
			d.changed()
		}
		return false
	}
	if !had {
		d.raise(api.Finding{Code: api.CodeDisk, Severity: api.SevError, Subject: path,
			Message: fmt.Sprintf("the node cannot write %s: %v; it tries again every %s, and status (this API) stays current in memory", path, err, diskRetry),
			Fix:     "free space on (or fix the permissions of) the data folder's file system; the finding clears at the next write that works"})
	}
	return true
}
