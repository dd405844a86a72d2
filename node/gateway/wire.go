package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sjson "github.com/segmentio/encoding/json"
)

// maxDepth bounds how deeply a message may nest, as the SDK bounds it: the
// parser recurses, and a line of brackets would otherwise cost the node's stack.
const maxDepth = 1000

var errTooDeep = fmt.Errorf("a message nested deeper than %d levels", maxDepth)

// wireMessage is a JSON-RPC message as it arrives; "method" is kept raw so that
// its presence is told apart from its absence, as the SDK does.
type wireMessage struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params"`
	Result     json.RawMessage `json:"result"`
	Error      *jsonrpc.Error  `json:"error"`
}

// DecodeMessage decodes one JSON-RPC message as the SDK's jsonrpc.DecodeMessage
// does (keys matched exactly, the same nesting bound, the same message types),
// but from the line itself: the SDK streams every message through a new decoder
// whose read buffer, allocated and cleared for each message, cost more than all
// else the node does for a small call. Unlike the SDK it refuses text after the
// message.
func DecodeMessage(line []byte) (jsonrpc.Message, error) {
	if err := checkDepth(line); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	var w wireMessage
	rest, err := sjson.Parse(line, &w, sjson.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(bytes.TrimSpace(rest)) != 0 {
		err = errors.New("text after the message")
	}
	if err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if w.VersionTag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", w.VersionTag, "2.0")
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, err
	}
	if len(w.Method) > 0 {
		var method string
		if _, err := sjson.Parse(w.Method, &method, 0); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		return &jsonrpc.Request{Method: method, ID: id, Params: w.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: w.Result}
	if w.Error != nil {
		resp.Error = w.Error
	}
	return resp, nil
}

// checkDepth refuses a message that nests deeper than maxDepth.
func checkDepth(b []byte) error {
	depth, inStr, esc := 0, false, false
	for _, c := range b {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return errTooDeep
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
