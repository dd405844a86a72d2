package manifest

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem, located by file and field path
// (".mcp.json: mcpServers.db.command: must be a string").
type FieldError struct {
	File  string `json:"file"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

func (e *FieldError) Error() string {
	switch {
	case e.Field == "":
		return e.File + ": " + e.Msg
	case e.File == "":
		return e.Field + ": " + e.Msg
	}
	return e.File + ": " + e.Field + ": " + e.Msg
}

// Errors collects every problem a plugin folder has, so an author sees them all.
type Errors []*FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// AsErrors extracts the list from an error returned by Load.
func AsErrors(err error) (Errors, bool) {
	var es Errors
	if errors.As(err, &es) {
		return es, true
	}
	return nil, false
}

type collector struct {
	errs Errors
}

func (c *collector) add(file, field, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{File: file, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs
}
