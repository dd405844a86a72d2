package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/spf13/cobra"

	"oz0.ai/node/node/gateway"
)

func newMCPCmd(g *globals) *cobra.Command {
	var agentHooks bool
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the node's tools over stdio MCP (for any MCP client to launch)",
		Long: `A stdio bridge to the running node's MCP endpoint (<data>/run/mcp.sock), so any MCP
client can use the node's tools, e.g.:

  claude mcp add oz0 -- oz0-node mcp

Messages are relayed as they are, both ways; the node does the rest. With
--agent-hooks (the entry oz0-node setup writes) the client forwards its own hook
events through oz0-node hook, so the node does not fire the plugins' PreToolUse,
PostToolUse, SessionStart and SessionEnd hooks a second time for its calls.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			up, err := mcpTransport(d).Connect(ctx)
			if err != nil {
				return fmt.Errorf("connect to the node's MCP endpoint %s (is the node running?): %w", d.MCP(), err)
			}
			defer up.Close()
			down := newStdioConn(os.Stdin, os.Stdout)
			var edit func(jsonrpc.Message) jsonrpc.Message
			if agentHooks {
				edit = markAgentHooks
			}
			return relay(ctx, cancel, down, up, edit)
		},
	}
	c.Flags().BoolVar(&agentHooks, "agent-hooks", false, "the client forwards its hook events (oz0-node hook): the node fires no hooks itself for its calls")
	return c
}

// markAgentHooks adds the agent-hooks capability to the client's initialize
// request; every other message passes unchanged.
func markAgentHooks(msg jsonrpc.Message) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "initialize" {
		return msg
	}
	var params map[string]any
	if json.Unmarshal(req.Params, &params) != nil || params == nil {
		return msg
	}
	caps, _ := params["capabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
	}
	exp, _ := caps["experimental"].(map[string]any)
	if exp == nil {
		exp = map[string]any{}
	}
	exp[gateway.AgentHooksCapability] = map[string]any{}
	caps["experimental"] = exp
	params["capabilities"] = caps
	b, err := json.Marshal(params)
	if err != nil {
		return msg
	}
	out := *req
	out.Params = b
	return &out
}

// msgConn is what relay needs of a connection.
type msgConn interface {
	Read(context.Context) (jsonrpc.Message, error)
	Write(context.Context, jsonrpc.Message) error
}

// relay copies JSON-RPC messages between two connections until either ends; the
// client closing its side (end of input) is a clean end. edit, when set, may
// change what a sends to b.
func relay(ctx context.Context, cancel context.CancelFunc, a, b msgConn, edit func(jsonrpc.Message) jsonrpc.Message) error {
	errc := make(chan error, 2)
	pump := func(from, to msgConn, edit func(jsonrpc.Message) jsonrpc.Message) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			if edit != nil {
				msg = edit(msg)
			}
			if err := to.Write(ctx, msg); err != nil {
				errc <- err
				return
			}
		}
	}
	go pump(a, b, edit)
	go pump(b, a, nil)
	err := <-errc
	cancel()
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// maxLine bounds one message from the client.
const maxLine = 64 << 20

// stdioConn is the bridge's side towards its MCP client: newline-delimited
// JSON-RPC on stdin and stdout, the stdio transport's framing. A line that is not
// a JSON-RPC message is answered with a JSON-RPC error (-32700 for text that is
// not JSON, -32600 for JSON that is not a message) and skipped: one bad line does
// not end the session.
type stdioConn struct {
	r   *bufio.Reader
	wmu sync.Mutex
	w   io.Writer
}

func newStdioConn(r io.Reader, w io.Writer) *stdioConn {
	return &stdioConn{r: bufio.NewReaderSize(r, 64<<10), w: w}
}

func (c *stdioConn) Read(context.Context) (jsonrpc.Message, error) {
	for {
		line, err := readLine(c.r, maxLine)
		if errors.Is(err, errLineTooLong) {
			c.reject(nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: a message longer than %d bytes", maxLine))
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			msg, derr := jsonrpc.DecodeMessage(line)
			if derr == nil {
				return msg, nil
			}
			if !json.Valid(line) {
				c.reject(nil, jsonrpc.CodeParseError, "parse error: the line is not JSON")
			} else {
				var probe struct {
					ID json.RawMessage `json:"id"`
				}
				json.Unmarshal(line, &probe)
				c.reject(probe.ID, jsonrpc.CodeInvalidRequest, "invalid request: "+derr.Error())
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

func (c *stdioConn) Write(_ context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(b)
}

func (c *stdioConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(append(b, '\n'))
	return err
}

// reject answers a line that is no message. id is the line's id when it had a
// usable one (a string or a number), else null.
func (c *stdioConn) reject(id json.RawMessage, code int, msg string) {
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg},
	})
	c.writeLine(b)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline). A line over max is consumed to
// its end and reported as errLineTooLong, so the next read starts afresh.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, errLineTooLong
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
