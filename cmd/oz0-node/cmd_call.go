package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/termtext"
)

// unixHTTP is an HTTP client whose every request goes to one unix socket.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		// An MCP client behind `oz0-node mcp` may have many calls in flight;
		// keep their connections rather than redial beyond the default two.
		MaxIdleConnsPerHost: 16,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// mcpTransport reaches the running node's MCP endpoint on <data>/run/mcp.sock.
func mcpTransport(d datadir.Dir) *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{Endpoint: "http://oz0-node/mcp", HTTPClient: unixHTTP(d.MCP()), MaxRetries: -1}
}

// parseArgs turns --arg k=v (numbers, booleans and JSON values parsed) and --json
// into the tool's arguments.
func parseArgs(kv []string, jsonArgs string) (map[string]any, error) {
	args := map[string]any{}
	if jsonArgs != "" {
		if err := json.Unmarshal([]byte(jsonArgs), &args); err != nil {
			return nil, usagef("--json: not a JSON object: %v", err)
		}
	}
	for _, item := range kv {
		k, v, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return nil, usagef("--arg %q: must be key=value", item)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			args[k] = n
		} else if f, err := strconv.ParseFloat(v, 64); err == nil {
			args[k] = f
		} else if b, err := strconv.ParseBool(v); err == nil {
			args[k] = b
		} else {
			args[k] = v
		}
	}
	return args, nil
}

func newCallCmd(g *globals) *cobra.Command {
	var kv []string
	var jsonArgs string
	var asJSON bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "call TOOL [--arg k=v]… [--json ARGS]",
		Short: "Call a tool (<plugin>__<tool>) through the running node and print the result",
		Long: `Call a tool through the running node, as any MCP client would, and print its text
content. A refused tool answers with the refusal; the exit code is then 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			args, err := parseArgs(kv, jsonArgs)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cl := mcp.NewClient(&mcp.Implementation{Name: "oz0-node-call", Version: versionString()}, nil)
			cs, err := cl.Connect(ctx, mcpTransport(d), nil)
			if err != nil {
				return fmt.Errorf("connect to the node's MCP endpoint %s (is the node running?): %w", d.MCP(), err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: a[0], Arguments: args})
			if err != nil {
				return fmt.Errorf("call %s: %w", a[0], err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				for _, c := range res.Content {
					// A tool's output is the plugin's text: never raw on a terminal.
					if t, ok := c.(*mcp.TextContent); ok {
						fmt.Fprintln(out, termtext.Clean(t.Text))
					} else {
						b, _ := json.Marshal(c)
						fmt.Fprintln(out, string(termtext.EscapeJSON(b)))
					}
				}
			}
			if res.IsError {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&kv, "arg", nil, "a tool argument key=value (numbers and booleans are parsed); repeatable")
	c.Flags().StringVar(&jsonArgs, "json", "", "the tool arguments as one JSON object")
	c.Flags().BoolVar(&asJSON, "output-json", false, "print the whole MCP result as JSON")
	c.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long")
	return c
}
