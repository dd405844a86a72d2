package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxResult is the largest message a local server may send (one JSON-RPC
// line, so one call's result): larger ones are answered to their caller as an
// error and the connection to the server goes on.
const DefaultMaxResult = 8 << 20

// stdioTransport runs a server's command and speaks MCP over its stdin/stdout, as
// the SDK's CommandTransport does, but with its output bounded per message: the
// SDK's own line cap ends the whole connection, failing every other call in
// flight on that server.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration
	max       int
	// tooLarge is told of each message dropped, with the id it answered (if
	// found) and its size so far.
	tooLarge func(id string, size int)
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	r := &boundedLines{in: bufio.NewReaderSize(stdout, 64<<10), max: t.max, tooLarge: t.tooLarge}
	w := &stdinCloser{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate}
	return (&mcp.IOTransport{Reader: io.NopCloser(r), Writer: w}).Connect(ctx)
}

// stdinCloser ends the server the way the stdio transport asks: close its input,
// wait, then SIGTERM, wait, then SIGKILL.
type stdinCloser struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (s *stdinCloser) Close() error {
	s.WriteCloser.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case err := <-done:
			return err
		case <-time.After(s.terminate):
		}
		s.cmd.Process.Signal(sig)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(s.terminate):
		return fmt.Errorf("server process %d did not exit after SIGKILL", s.cmd.Process.Pid)
	}
}

// boundedLines passes newline-delimited messages through whole; a message longer
// than max is dropped as it arrives (never held in full) and replaced by a
// JSON-RPC error answering the same id.
type boundedLines struct {
	in       *bufio.Reader
	max      int
	tooLarge func(id string, size int)
	out      []byte // the message being handed out
	line     []byte // reused buffer
}

func (b *boundedLines) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if err := b.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *boundedLines) next() error {
	if cap(b.line) > 1<<20 {
		b.line = nil // do not keep a large message's buffer after it
	}
	b.line = b.line[:0]
	size := 0
	over := false
	for {
		chunk, err := b.in.ReadSlice('\n')
		size += len(chunk)
		if !over {
			if size > b.max {
				over = true // keep what is read so far (the id is near the start)
			} else {
				b.line = append(b.line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if over {
				return err
			}
			if len(b.line) > 0 {
				b.out = b.line
				return nil
			}
			return err
		}
		break
	}
	if !over {
		b.out = b.line
		return nil
	}
	id := topLevelID(b.line)
	if b.tooLarge != nil {
		b.tooLarge(string(id), size)
	}
	if id == nil {
		return nil // nothing to answer: dropped
	}
	msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"result too large: over %d MiB (dropped by the node)"}}`+"\n", id, b.max>>20)
	b.out = []byte(msg)
	return nil
}

// topLevelID finds the "id" member of the object a (possibly truncated) JSON
// message starts with; nil when it is not in the part given.
func topLevelID(prefix []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if tok == "id" {
			if err := dec.Decode(&v); err != nil {
				return nil
			}
			if len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
				return v
			}
			return nil
		}
		if err := dec.Decode(&v); err != nil {
			return nil
		}
	}
	return nil
}
