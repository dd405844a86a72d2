package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/plan"
)

// hookPairs is how many triples BenchmarkHookCall measures.
const hookPairs = 40

// BenchmarkHookCall times a tool call through the gateway with one PreToolUse hook
// (Python, in its plugin's bwrap sandbox) in front of it, in triples: the same call
// to a plugin without hooks, the call with the hook, and the hook's sandboxed
// process run on its own with the same payload. The hook path's own overhead is
// what the hooked call costs beyond the plain call and the hook's process: the
// node's planning, spec, payload and verdict.
func BenchmarkHookCall(b *testing.B) {
	be := bwrapOrSkip(b)
	d, n := testNode(b, "demo", "demo", "hooked")
	root := d.PluginCommit("hooked", fmt.Sprintf("%040x", 2))
	os.MkdirAll(filepath.Join(root, "hooks"), 0o755)
	os.WriteFile(filepath.Join(root, "hooks", "hooks.json"), []byte(`{"hooks": {"PreToolUse": [
  {"matcher": ".*", "hooks": [{"type": "command", "command": "python3 ${PLUGIN_ROOT}/hooks/allow.py", "timeout": 10}]}]}}`), 0o644)
	os.WriteFile(filepath.Join(root, "hooks", "allow.py"), []byte("import json, sys\njson.load(sys.stdin)\n"), 0o644)
	cs := throughGateway(b, be, d, n)
	args := map[string]any{"text": "x"}
	call := func(tool string) (time.Duration, error) {
		t0 := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: tool error %+v", tool, res.Content)
		}
		return time.Since(t0), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, tool := range []string{"demo__echo", "hooked__echo"} {
		for {
			if _, err := call(tool); err == nil {
				break
			} else if time.Now().After(deadline) {
				b.Fatalf("%s never answered: %v", tool, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	p, err := n.One("hooked")
	if err != nil {
		b.Fatal(err)
	}
	if len(p.Manifest.Hooks) != 1 {
		b.Fatalf("plugin hooked has %d hooks, want the one PreToolUse hook", len(p.Manifest.Hooks))
	}
	spec, _, err := p.HookSpec(0, "hooked", plan.Proxy{})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"session_id":"bench","hook_event_name":"PreToolUse","tool_name":"hooked__echo","tool_input":{"text":"x"}}`)
	alone := func() (time.Duration, error) {
		t0 := time.Now()
		proc, err := be.Command(context.Background(), spec)
		if err != nil {
			return 0, err
		}
		var errb bytes.Buffer
		proc.Cmd.Stdin, proc.Cmd.Stderr = bytes.NewReader(payload), &errb
		err = proc.Cmd.Run()
		if cerr := proc.Cleanup(); err == nil {
			err = cerr
		}
		if err != nil {
			err = fmt.Errorf("hook alone: %w: %s", err, errb.String())
		}
		return time.Since(t0), err
	}
	// The node's own work for one hook run, timed directly: plan, spec, home,
	// payload, and the sandbox's set-up and teardown (argv, seccomp, cgroups)
	// without its process. The triples below bound the rest, but this machine's
	// noise in a Python start is larger than the figure itself.
	var path latencies
	for range hookPairs * 5 {
		t0 := time.Now()
		p, err := n.One("hooked")
		if err != nil {
			b.Fatal(err)
		}
		spec, _, err := p.HookSpec(0, "hooked", plan.Proxy{})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.EnsureHome(); err != nil {
			b.Fatal(err)
		}
		if err := p.EnsureView(spec); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(map[string]any{"session_id": "bench", "hook_event_name": "PreToolUse", "tool_name": "hooked__echo", "tool_input": args}); err != nil {
			b.Fatal(err)
		}
		proc, err := be.Command(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := proc.Cleanup(); err != nil {
			b.Fatal(err)
		}
		path.add(time.Since(t0))
	}
	var plain, hooked, process, overhead latencies
	for range hookPairs {
		dp, err := call("demo__echo")
		if err != nil {
			b.Fatal(err)
		}
		dh, err := call("hooked__echo")
		if err != nil {
			b.Fatal(err)
		}
		da, err := alone()
		if err != nil {
			b.Fatal(err)
		}
		plain.add(dp)
		hooked.add(dh)
		process.add(da)
		overhead.add(dh - dp - da)
	}
	for name, l := range map[string]*latencies{"plain": &plain, "pre-hook": &hooked, "hook-process": &process, "hook-overhead": &overhead, "hook-path": &path} {
		b.Run(name, func(b *testing.B) { l.report(b); b.ReportMetric(0, "ns/op") })
	}
}
