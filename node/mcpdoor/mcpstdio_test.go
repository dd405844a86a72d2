package mcpdoor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A line over the limit is consumed whole and reported; the next line reads afresh,
// whatever the reader's buffer size.
func TestReadLineSkipsAnOverlongLine(t *testing.T) {
	in := strings.Repeat("x", 100) + "\n" + "ok\n" + "tail"
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	if _, err := readLine(r, 50); !errors.Is(err, errLineTooLong) {
		t.Fatalf("overlong line: err %v", err)
	}
	if l, err := readLine(r, 50); err != nil || string(l) != "ok" {
		t.Fatalf("next line %q %v", l, err)
	}
	if l, err := readLine(r, 50); !errors.Is(err, io.EOF) || string(l) != "tail" {
		t.Fatalf("last line %q %v", l, err)
	}
}

// The stdio endpoint answers bad lines and hands on the good ones.
func TestCallerConnAnswersBadLines(t *testing.T) {
	in := "not json\n\n" + `{"jsonrpc":"2.0","id":"a","method":7}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n"
	var out bytes.Buffer
	c := newCallerConn(strings.NewReader(in), &out, nil, MaxLine)
	msg, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "ping" {
		t.Fatalf("message %#v", msg)
	}
	want := `{"error":{"code":-32700,"message":"parse error: the line is not JSON"},"id":null,"jsonrpc":"2.0"}` + "\n" +
		`{"error":{"code":-32600,"message":"invalid request: `
	if !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), `"id":"a"`) {
		t.Errorf("answers:\n%s", out.String())
	}
	if _, err := c.Read(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("end of input: %v", err)
	}
}
