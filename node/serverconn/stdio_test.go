package serverconn

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A message over the limit becomes an error for its own id (the top-level one,
// not one nested in the result), smaller ones pass whole, and the stream goes on.
func TestBoundedLinesAnswersOverlongMessagesWithTheirID(t *testing.T) {
	big := strings.Repeat("x", 300)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"result":{"text":"ok"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"id":99,"text":"` + big + `"}]}}`,
		`{"jsonrpc":"2.0","result":{"content":[{"id":98,"text":"` + big + `"}]},"id":8}`,
		`{"jsonrpc":"2.0","id":"s-3","result":{"text":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"text":"after"}}`,
	}, "\n") + "\n"
	var dropped []string
	b := &boundedLines{in: bufio.NewReaderSize(strings.NewReader(in), 16), max: 200,
		tooLarge: func(id string, size int) { dropped = append(dropped, id) }}
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4 (the id-less overlong one dropped):\n%s", len(lines), out)
	}
	want := []string{`"id":1,"result"`, `"id":7,"error"`, `"id":"s-3","error"`, `"text":"after"`}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s, want it to contain %s", i, lines[i], w)
		}
	}
	if strings.Join(dropped, ",") != `7,,"s-3"` {
		t.Errorf("dropped ids %q", dropped)
	}
}

// A server's notifications past its rate are dropped and counted, whether the
// byte scan sees them (plain keys) or only the decoder does (escaped keys); its
// responses to the node's requests always pass, and a line that is not JSON-RPC
// is skipped (costing the rate).
func TestLineConnLimitsNotifications(t *testing.T) {
	var in strings.Builder
	// One large notification costs more than the whole burst.
	in.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + strings.Repeat("x", 1<<20) + `"}}` + "\n")
	for i := range 50 {
		in.WriteString(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}` + "\n")
		in.WriteString(`{"jsonrpc":"2.0","m\u0065thod":"notifications/message","params":{"level":"info","data":"x"}}` + "\n")
		if i%10 == 0 {
			in.WriteString("not json\n")
			in.WriteString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"result":{}}` + "\n")
		}
	}
	var dropped atomic.Int64
	var reports []int64
	l := NewNoteLimiter(1, 10, &dropped, func(n int64) { reports = append(reports, n) })
	r := &boundedLines{in: bufio.NewReader(strings.NewReader(in.String())), max: 4 << 20}
	c := newLineConn(&stdinCloser{WriteCloser: discardCloser{io.Discard}})
	for i := 0; i < 50; i += 10 {
		id, _ := jsonrpc.MakeID(float64(i))
		if err := c.Write(context.Background(), &jsonrpc.Request{ID: id, Method: "tools/call"}); err != nil {
			t.Fatal(err)
		}
	}
	go c.readLoop(r, l, slog.New(slog.DiscardHandler))
	notes, responses := 0, 0
	for {
		msg, err := c.Read(context.Background())
		if err != nil {
			break
		}
		switch msg.(type) {
		case *jsonrpc.Request:
			notes++
		case *jsonrpc.Response:
			responses++
		}
	}
	if responses != 5 {
		t.Errorf("%d responses passed, want all 5", responses)
	}
	// The 5 lines that are no message take tokens too.
	if notes < 5 || notes > 12 {
		t.Errorf("%d of 101 notifications passed a limiter of burst 10", notes)
	}
	if got := dropped.Load(); got < int64(101-notes) || got > int64(106-notes) {
		t.Errorf("dropped counts %d, want %d to %d", got, 101-notes, 106-notes)
	}
	if len(reports) != 1 {
		t.Errorf("the drops were reported %d times, want once (then at most every %v)", len(reports), DropReport)
	}
}

type discardCloser struct{ io.Writer }

func (discardCloser) Close() error { return nil }

// A server flooding responses to requests the node never sent, or lines that are
// no message, escapes no limit: each costs a decode (the SDK then ignores it), so
// past the server's rate they are dropped and counted like notifications, and
// paced with them. Responses to the node's own requests always pass.
func TestLineConnLimitsUnsolicitedResponsesAndGarbage(t *testing.T) {
	var dropped atomic.Int64
	l := NewNoteLimiter(1, 10, &dropped, nil)
	c := newLineConn(&stdinCloser{WriteCloser: discardCloser{io.Discard}})
	for _, id := range []int64{1, 2} {
		rid, _ := jsonrpc.MakeID(float64(id))
		if err := c.Write(context.Background(), &jsonrpc.Request{ID: rid, Method: "tools/call"}); err != nil {
			t.Fatal(err)
		}
	}
	var in strings.Builder
	for i := range 100 {
		in.WriteString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(1000+i) + `,"result":{}}` + "\n")
		in.WriteString(`{"jsonrpc":"2.0","x":` + strconv.Itoa(i) + "}\n")
	}
	in.WriteString(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","id":2,"result":{}}` + "\n")
	r := &boundedLines{in: bufio.NewReader(strings.NewReader(in.String())), max: 4 << 20}
	go c.readLoop(r, l, slog.New(slog.DiscardHandler))
	unsolicited, answers := 0, 0
	for {
		msg, err := c.Read(context.Background())
		if err != nil {
			break
		}
		if resp, ok := msg.(*jsonrpc.Response); ok {
			if v, _ := resp.ID.Raw().(int64); v == 1 || v == 2 {
				answers++
			} else {
				unsolicited++
			}
		}
	}
	if answers != 2 {
		t.Errorf("%d of the 2 answers to the node's requests passed", answers)
	}
	if unsolicited > 12 {
		t.Errorf("%d of 100 unsolicited responses passed a limiter of burst 10", unsolicited)
	}
	if got := dropped.Load(); got < 200-12 {
		t.Errorf("dropped counts %d of 200 unsolicited responses and lines that are no message (burst 10)", got)
	}
}

// A server flooding, as fast as it can write, notifications, answers to requests
// never sent, or lines that are no message: whatever the shape, the node drops
// what is over the rate for a few per cent of a core (answers to nothing took
// ~0.7 core and lines that are no message ~0.5, decoded unlimited; lines the
// scan cannot judge, such as notifications with an escaped key, ~0.45 paced as
// the scan's drops).
func TestStdioFloodOfAnyShapeCostsLittle(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: the flooding server was not run")
	}
	for name, line := range map[string]string{
		"notification":         `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"nobody","progress":1}}`,
		"answer-to-none":       `{"jsonrpc":"2.0","id":123456,"result":{}}`,
		"no-message":           `{"x":1,"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy":2}`,
		"escaped-garbage":      `{"\u0078":1,"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy":2}`,
		"escaped-notification": `{"jsonrpc":"2.0","m\u0065thod":"notifications/progress","params":{"progressToken":"nobody","progress":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("python3", "-c", `
import sys, time
line = sys.argv[1] * 100
end = time.time() + 3
while time.time() < end:
    sys.stdout.write(line)
`, line+"\n")
			var dropped atomic.Int64
			tr := &Stdio{Cmd: cmd, Max: DefaultMaxResult, Notes: NewNoteLimiter(200, 2000, &dropped, nil), Log: slog.New(slog.DiscardHandler)}
			c, err := tr.Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var got atomic.Int64
			go func() {
				for {
					if _, err := c.Read(context.Background()); err != nil {
						return
					}
					got.Add(1)
				}
			}()
			time.Sleep(500 * time.Millisecond)
			var r0, r1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			t0 := time.Now()
			time.Sleep(2 * time.Second)
			syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			cores := float64(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / float64(time.Since(t0))
			t.Logf("%s flood: the node's side used %.2f cores; %d passed, %d dropped", name, cores, got.Load(), dropped.Load())
			if dropped.Load() == 0 {
				t.Errorf("nothing of the %s flood was dropped", name)
			}
			if got.Load() > 2000+200*4 {
				t.Errorf("%d messages of the %s flood passed a rate of 200 (burst 2000)", got.Load(), name)
			}
			if cores > 0.25 {
				t.Errorf("the node's side used %.2f cores while a server flooded %s lines", cores, name)
			}
		})
	}
}
