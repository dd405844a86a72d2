package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// lines reads every line of the stream's files, oldest first, failing the test
// on any line that is not a whole record.
func lines(t *testing.T, path string) []api.AuditRecord {
	t.Helper()
	return fileLines(t, Files(path)...)
}

// fileLines reads the lines of the files given, in order.
func fileLines(t *testing.T, files ...string) []api.AuditRecord {
	t.Helper()
	var out []api.AuditRecord
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s does not end with a newline: a torn line", p)
		}
		for i, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var r api.AuditRecord
			if err := json.Unmarshal(l, &r); err != nil || r.Seq == 0 {
				t.Fatalf("%s line %d is no record: %q (%v)", p, i+1, l, err)
			}
			out = append(out, r)
		}
	}
	return out
}

// contiguous fails unless the numbers run one by one from first.
func contiguous(t *testing.T, rs []api.AuditRecord, first uint64) {
	t.Helper()
	for i, r := range rs {
		if r.Seq != first+uint64(i) {
			t.Fatalf("line %d has number %d, want %d", i, r.Seq, first+uint64(i))
		}
	}
}

func TestStreamNumbersLinesAndIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "audit.jsonl")
	var seen []uint64
	var mu sync.Mutex
	s, err := Open(path, Options{OnWrite: func(r api.AuditRecord) { mu.Lock(); seen = append(seen, r.Seq); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		s.Add(api.AuditRecord{Kind: "call", Plugin: "p", Tool: fmt.Sprintf("p__t%d", i), Decision: "allow"})
	}
	s.Close()
	rs := lines(t, path)
	if len(rs) != 100 || rs[0].Time == "" || rs[99].Tool != "p__t99" {
		t.Fatalf("got %d lines: first %+v", len(rs), rs[0])
	}
	contiguous(t, rs, 1)
	if len(seen) != 100 || seen[99] != 100 {
		t.Fatalf("OnWrite saw %d lines", len(seen))
	}
	for _, p := range []string{path, path + ".lock"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", p, fi.Mode(), err)
		}
	}
	// A later writer goes on from the last number.
	s, _ = Open(path, Options{})
	s.Add(api.AuditRecord{Kind: "call"})
	s.Close()
	rs = lines(t, path)
	contiguous(t, rs, 1)
	if len(rs) != 101 {
		t.Fatalf("%d lines", len(rs))
	}
}

// Several writers of one stream (the node, exec, hook) share one numbering and
// never split each other's lines.
func TestWritersShareOneNumbering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			s, err := Open(path, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 500 {
				s.Add(api.AuditRecord{Kind: "egress", Plugin: fmt.Sprintf("w%d", w), Host: strings.Repeat("h", i%200) + ".example", Port: i})
			}
			s.Close()
		})
	}
	wg.Wait()
	rs := lines(t, path)
	if len(rs) != 2000 {
		t.Fatalf("%d lines, want 2000", len(rs))
	}
	contiguous(t, rs, 1)
}

func TestRotationKeepsTheDroppedCount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path, Options{MaxBytes: 4 << 10, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		s.Add(api.AuditRecord{Kind: "call", Tool: fmt.Sprintf("p__t%d", i)})
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // several batches, several rotations
		}
	}
	s.Close()
	files := Files(path)
	if len(files) != 3 || files[0] != path+".2" || files[2] != path {
		t.Fatalf("files %v, want .2, .1 and the live one", files)
	}
	rs := lines(t, path)
	contiguous(t, rs, rs[0].Seq)
	// Every file after a rotation starts with the count of lines gone.
	for _, p := range files[1:] {
		f := fileLines(t, p)
		if f[0].Kind != "audit" || f[0].Decision != "rotated" {
			t.Fatalf("%s starts with %+v, want the rotation line", p, f[0])
		}
	}
	live := fileLines(t, path)
	if got, want := live[0].DroppedLines, rs[0].Seq-1; got != want || want == 0 {
		t.Fatalf("the live file says %d lines were dropped; the oldest kept line is %d", got, rs[0].Seq)
	}
	last := rs[len(rs)-1]
	if last.Tool != "p__t399" {
		t.Fatalf("last line %+v", last)
	}
	for _, p := range files {
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 || fi.Size() > 8<<10 {
			t.Fatalf("%s: mode %v size %d", p, fi.Mode(), fi.Size())
		}
	}
}

func TestATornLineIsCutAndTheNumbersGoOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, _ := Open(path, Options{})
	for range 3 {
		s.Add(api.AuditRecord{Kind: "hook"})
	}
	s.Close()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	torn := `{"seq":4,"time":"2026-01-01T00:00:00Z","kind":"ca`
	f.WriteString(torn)
	f.Close()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(api.AuditRecord{Kind: "call"})
	s.Close()
	rs := lines(t, path)
	contiguous(t, rs, 1)
	if len(rs) != 5 || rs[3].Decision != "repaired" || rs[3].CutBytes != int64(len(torn)) || rs[4].Kind != "call" {
		t.Fatalf("got %+v", rs)
	}
}

// A writer killed mid-write leaves no torn line for long: the next writer cuts
// it before it writes, and the numbers go on from the last whole line.
func TestKilledWriterLeavesNoTornLine(t *testing.T) {
	if os.Getenv("AUDIT_CHILD") != "" {
		s, err := Open(os.Getenv("AUDIT_CHILD"), Options{MaxBytes: 4 << 20, Keep: 1})
		if err != nil {
			os.Exit(3)
		}
		big := strings.Repeat("x", maxText)
		for i := 0; ; i++ {
			s.Add(api.AuditRecord{Kind: "call", Rule: big, Tool: big, Host: big, Session: big, By: big, RequestID: fmt.Sprint(i)})
		}
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cuts := 0
	for round := range 12 {
		was := size(path)
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterLeavesNoTornLine$")
		cmd.Env = append(os.Environ(), "AUDIT_CHILD="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The kill lands while the child writes: wait until it has written this
		// round (a loaded machine can take longer than the delay to start it).
		waitWritten(t, path, was)
		time.Sleep(time.Duration(20+round*23) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		before := lastLine(t, path)
		s, err := Open(path, Options{MaxBytes: 4 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		s.Add(api.AuditRecord{Kind: "call", Tool: "after-kill"})
		s.Close()
		rs := lines(t, path) // fails on a torn line
		contiguous(t, rs, rs[0].Seq)
		n := len(rs)
		if rs[n-1].Tool != "after-kill" {
			t.Fatalf("round %d: last line %+v", round, rs[n-1])
		}
		if n > 1 && rs[n-2].Decision == "repaired" {
			cuts++
			if before == "" {
				t.Fatalf("round %d: a cut, but the file ended with a whole line", round)
			}
		}
	}
	if lines := len(lines(t, path)); lines < 100 {
		t.Fatalf("the killed writers wrote only %d lines: the test proved little", lines)
	}
	t.Logf("%d of 12 kills left a torn line, each cut", cuts)
}

func size(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitWritten waits until path's size is no longer was (a rotation shrinks it).
func waitWritten(t *testing.T, path string, was int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); size(path) == was; {
		if time.Now().After(deadline) {
			t.Fatalf("the child wrote nothing to %s in 30 s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lastLine is the file's unterminated tail ("" when it ends with a newline).
func lastLine(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, '\n')
	return string(b[i+1:])
}

func TestArgsDigest(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"a":1,"b":"x y"}`))
	want := hex.EncodeToString(sum[:])
	for _, in := range []string{`{"a":1,"b":"x y"}`, "{ \"a\" : 1,\n \"b\":\"x y\" }", "{\"a\":1,\t\"b\":\"x y\"}\r\n"} {
		if got := ArgsDigest(json.RawMessage(in)); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
	// Not JSON: digested as it came, with or without whitespace.
	for _, in := range []string{`{"a":`, `{"a": `} {
		sum := sha256.Sum256([]byte(in))
		if got := ArgsDigest(json.RawMessage(in)); got != hex.EncodeToString(sum[:]) {
			t.Errorf("%q: %s, want the digest of its bytes", in, got)
		}
	}
	empty := sha256.Sum256([]byte("{}"))
	if ArgsDigest(nil) != hex.EncodeToString(empty[:]) || ArgsDigest(json.RawMessage("null")) != ArgsDigest(nil) {
		t.Error("no arguments are digested as {}, as they are forwarded")
	}
}

// The stream's lines are what encoding/json's Encoder writes for a record,
// byte for byte (docs/audit.md): HTML characters, bytes that are no UTF-8,
// U+2028, control characters, durations of every size, empty and full fields.
func TestLinesAreEncodingJSONs(t *testing.T) {
	texts := []string{"", "plain", `<a href="x">&amp;</a>`, "bad \xff\xfe utf8", "line\u2028sep\u2029", "ctl \x00\x01\t\n\r\x7f", "é ü 日本 🙂", `back\slash "quoted"`}
	secs := []float64{0, 1e-9, 5e-7, 1e-6, 0.000123, 0.5, 1, 12.345678901, 1e20, 1e21, 3.4e38}
	var recs []api.AuditRecord
	for i, x := range texts {
		for j, f := range secs {
			recs = append(recs, api.AuditRecord{Seq: uint64(i*100 + j), Time: "2026-12-02T10:00:00.123456789Z", Kind: "call",
				Plugin: x, Server: x, Host: x, Port: j * 1000, Addr: x, Decision: "allow", Rule: x, Bytes: int64(-j),
				Door: "http", Path: "fast", Session: x, Tool: x + "__t", RequestID: x, Seconds: f, Outcome: x,
				RPCError: -32603 * int64(j%2), ResultBytes: j, ArgsSHA256: x, Event: x, Source: x, Network: x,
				Dropped: texts[:i], Approval: x, Asked: i, By: x, DroppedLines: uint64(j), CutBytes: int64(i), LostLines: 1 << 63})
		}
	}
	recs = append(recs, api.AuditRecord{}, api.AuditRecord{Seq: 7, Kind: "audit", Dropped: []string{}})
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	var got []byte
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			t.Fatal(err)
		}
		var err error
		if got, err = appendLine(got, &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want.Bytes()) {
		g, w := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("line %d:\n got %s\nwant %s", i, g[i], w[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
}

func TestClipBoundsPluginText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, _ := Open(path, Options{})
	dropped := make([]string, 40)
	for i := range dropped {
		dropped[i] = strings.Repeat("é", 2000)
	}
	s.Add(api.AuditRecord{Kind: "hook", Rule: strings.Repeat("é", 5000), Dropped: dropped})
	s.Close()
	if dropped[0] != strings.Repeat("é", 2000) {
		t.Fatal("the caller's slice was changed")
	}
	rs := lines(t, path)
	if len(rs[0].Rule) > maxText+4 || len(rs[0].Dropped) != 17 || !strings.HasPrefix(rs[0].Dropped[16], "… 24 more") {
		t.Fatalf("rule %d bytes, %d dropped entries", len(rs[0].Rule), len(rs[0].Dropped))
	}
}

func TestLastAndFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, _ := Open(path, Options{MaxBytes: 2 << 10, Keep: 3})
	for i := range 30 {
		s.Add(api.AuditRecord{Kind: "call", Tool: fmt.Sprintf("t%d", i)})
	}
	s.Close()
	last, err := Last(path, 5)
	all := lines(t, path)
	if err != nil || len(last) != 5 {
		t.Fatalf("Last: %+v %v", last, err)
	}
	for i, r := range last {
		if want := all[len(all)-5+i]; r.Seq != want.Seq || r.Tool != want.Tool {
			t.Fatalf("Last line %d is %+v, want %+v", i, r, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 100)
	go Follow(ctx, path, 10*time.Millisecond, func(r api.AuditRecord, _ []byte) bool {
		got <- r.Tool
		return r.Tool != "f39"
	})
	time.Sleep(50 * time.Millisecond)
	s, _ = Open(path, Options{MaxBytes: 2 << 10, Keep: 3})
	for i := range 40 {
		s.Add(api.AuditRecord{Kind: "call", Tool: fmt.Sprintf("f%d", i)})
		time.Sleep(time.Millisecond)
	}
	s.Close()
	var tools []string
	for tool := range got {
		if strings.HasPrefix(tool, "f") {
			tools = append(tools, tool)
		}
		if tool == "f39" {
			break
		}
	}
	if len(tools) != 40 {
		t.Fatalf("followed %d of 40 lines across rotations: %v", len(tools), tools)
	}
}

// A line is written soon after it is added, without waiting for Close or for
// more lines; when the disk stalls (here: another writer holds the stream's
// lock) Add blocks once the queue is full rather than dropping lines or
// growing without bound, and every line added before Close, including those
// that waited for room, is written.
func TestQueueWritesSoonBlocksWhenFullAndDrainsOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	first := make(chan struct{}, 1)
	s, err := Open(path, Options{OnWrite: func(r api.AuditRecord) {
		if r.Seq == 1 {
			first <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(api.AuditRecord{Kind: "call", Tool: "p__first"})
	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("a lone line was not written in 5 s")
	}

	// Stall the writer: hold the stream's lock from another open file.
	held, err := os.OpenFile(path+".lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	release := lockFile(held)
	// One batch may already have been taken by the stalled writer; then the
	// queue fills behind it.
	var added atomic.Int64
	var stop atomic.Bool
	adder := make(chan struct{})
	go func() {
		defer close(adder)
		for i := 0; i < 3*queue && !stop.Load(); i++ {
			s.Add(api.AuditRecord{Kind: "call", Tool: fmt.Sprintf("p__t%d", i)})
			added.Add(1)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	before := int(added.Load())
	time.Sleep(200 * time.Millisecond)
	if still := int(added.Load()); still != before {
		t.Fatalf("Add went on while the writer was stalled: %d then %d lines", before, still)
	}
	if before >= 3*queue {
		t.Fatalf("all %d lines were queued while the writer was stalled: the queue is unbounded", before)
	}
	if before > 2*queue+1 {
		t.Fatalf("%d lines queued while the writer was stalled, want at most %d", before, 2*queue+1)
	}
	// Close while an Add waits for room: it keeps its line.
	stop.Store(true)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond)
	release()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return 30 s after the lock was given back")
	}
	<-adder
	rs := lines(t, path)
	contiguous(t, rs, 1)
	if want := 1 + int(added.Load()); len(rs) != want {
		t.Fatalf("%d lines written, want the %d added before Close", len(rs), want)
	}
	s.Add(api.AuditRecord{Kind: "call"}) // after Close: dropped, no panic
	t.Logf("%d lines queued while stalled, %d written", before, len(rs))
}
