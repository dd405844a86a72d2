//go:build linux || darwin

package service

import (
	"strings"

	ks "github.com/kardianos/service"
)

// The service library is github.com/kardianos/service. It writes a new unit or plist
// and registers it, and on Linux it starts, stops and restarts through systemctl. The
// file it writes is the node's own rendering (render.go), handed to it as its custom
// template (SystemdScript, LaunchdConfig) escaped so that its engine gives the bytes
// back unchanged. What it does not do right stays the node's (docs/operators.md, "The
// node as a service"): replacing an installed file (it refuses an existing one and
// writes in place, where the node writes atomically and restarts a running service
// with the new flags), a unit's state (it reads systemd's reloading and deactivating
// as not installed, a failed unit only as an error text), launchd control (it uses
// the legacy load/unload), and the plist's mode and owner (launchd wants root:wheel
// 0644; the library writes under the umask as whoever runs it).

// program is the library's Interface. The node runs as `oz0-node run` and never
// through the library's Run, so both hooks are empty.
type program struct{}

func (program) Start(ks.Service) error { return nil }
func (program) Stop(ks.Service) error  { return nil }

// emptyAction renders as nothing in the library's template engine: "{{-" trims the
// one space written before it, and the if has no body (Name is set on every
// platform's data, so the key is always known).
const emptyAction = " {{- if Name}}{{end}}"

// escapeTemplate makes text a template for the library's engine that renders as
// text itself. In that engine only "{{" is special and has no escape, so after each
// "{" that another follows comes an empty action. A flag value such as
// `--label x={{Path}}` then reaches the file as written, not as the library's data.
func escapeTemplate(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); i++ {
		b.WriteByte(text[i])
		if text[i] == '{' && i+1 < len(text) && text[i+1] == '{' {
			b.WriteString(emptyAction)
		}
	}
	return b.String()
}

// libraryConfig is the library's configuration for s, named name (the unit's name
// on Linux, the job's label on macOS), with file as its custom template under key
// (none when file is nil: control needs no template).
func libraryConfig(name string, s Spec, key string, file []byte) *ks.Config {
	c := &ks.Config{
		Name:        name,
		Description: Description,
		Executable:  s.Binary,
		Option:      ks.KeyValue{"UserService": s.User},
	}
	if file != nil {
		c.Option[key] = escapeTemplate(string(file))
	}
	return c
}
