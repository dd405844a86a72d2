package main

import (
	"github.com/spf13/cobra"

	"oz0.ai/node/node/config"
)

// runFlags are the flags shared by `run`, `service install` and `service unit`:
// registered and validated by node/config, from one table.
type runFlags struct {
	f config.Flags
}

func (r *runFlags) add(c *cobra.Command) {
	r.f = config.Flags{}
	config.Register(c.Flags(), r.f)
}

func (r *runFlags) parse(g *globals) (config.Run, error) {
	if g.dataDir != "" {
		r.f["data-dir"] = []string{g.dataDir}
	}
	c, err := config.Parse(r.f)
	if err != nil {
		return config.Run{}, &usageError{err}
	}
	return c, nil
}
