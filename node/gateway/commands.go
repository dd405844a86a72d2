package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/commands"
)

// commandPrompts are the plugins' slash commands offered as prompts
// <plugin>__<command>: text the node renders itself, no server involved.
type commandPrompts struct {
	mu       sync.Mutex
	byName   map[string]commands.Command
	byPlugin map[string][]string
}

// SetCommands offers a plugin's commands as prompts, replacing what it offered
// before (nil takes them all away). A name a server's prompt already holds stays
// the server's.
func (g *Gateway) SetCommands(plugin string, cmds []commands.Command) {
	c := &g.cmds
	c.mu.Lock()
	if c.byName == nil {
		c.byName, c.byPlugin = map[string]commands.Command{}, map[string][]string{}
	}
	old := c.byPlugin[plugin]
	for _, n := range old {
		delete(c.byName, n)
	}
	delete(c.byPlugin, plugin)
	var add []*mcp.Prompt
	for _, cmd := range cmds {
		name := Namespaced(plugin, cmd.Name)
		g.mu.RLock()
		_, taken := g.prompts[name]
		g.mu.RUnlock()
		if taken || !validToolName(name) {
			g.opts.Logger.Warn("command not offered as a prompt", "plugin", plugin, "command", cmd.Name, "reason", "name taken or not valid")
			continue
		}
		c.byName[name] = cmd
		c.byPlugin[plugin] = append(c.byPlugin[plugin], name)
		p := &mcp.Prompt{Name: name, Description: cmd.Description}
		hint := cmd.ArgumentHint
		if hint == "" {
			hint = "the command's arguments ($ARGUMENTS)"
		}
		p.Arguments = []*mcp.PromptArgument{{Name: "arguments", Description: hint}}
		add = append(add, p)
	}
	c.mu.Unlock()
	var gone []string
	for _, n := range old {
		if !contains(c.byPlugin[plugin], n) {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		g.server.RemovePrompts(gone...)
	}
	for _, p := range add {
		g.server.AddPrompt(p, g.commandHandler(p.Name))
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (g *Gateway) commandHandler(name string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		g.cmds.mu.Lock()
		cmd, ok := g.cmds.byName[name]
		g.cmds.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("prompt %s is not available: its plugin was removed", name)
		}
		return &mcp.GetPromptResult{
			Description: cmd.Description,
			Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: cmd.Render(req.Params.Arguments["arguments"])}}},
		}, nil
	}
}
