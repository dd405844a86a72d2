package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// hookEventRuns is how many events BenchmarkHookEvent times.
const hookEventRuns = 40

// BenchmarkHookEvent times an event of Claude Code's as Claude Code meets it:
// `oz0-node hook` started as its hook command, with the event's payload on stdin,
// beside a running node (bwrap), from the command's start to its exit with the
// answer. The plugin's hook (a shell that reads its payload) runs in its sandbox
// in the node; the node times that run (its sandbox and process), and what the
// event costs beyond it is what the node adds to every event a plugin handles.
// Two more rows: the same command for an event no plugin handles (which setup no
// longer registers, so Claude Code never starts it; before, every event cost
// this), and the node binary starting (oz0-node version), the floor of any
// command hook.
func BenchmarkHookEvent(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("not measured: the node runs plugin hooks as per-plugin users, which needs root")
	}
	bwrapOrSkip(b)
	bin := nodeBinary(b)
	d, _ := testNode(b, "demo", "demo", "hooked")
	root := d.PluginCommit("hooked", fmt.Sprintf("%040x", 2))
	os.MkdirAll(filepath.Join(root, "hooks"), 0o755)
	os.WriteFile(filepath.Join(root, "hooks", "hooks.json"), []byte(`{"hooks": {"Stop": [
  {"hooks": [{"type": "command", "command": "cat > /dev/null", "timeout": 10}]}]}}`), 0o644)
	runNode(b, d)
	ctl := api.NewClient(d.Control())
	handled := []byte(`{"session_id":"bench","transcript_path":"/tmp/bench.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"Stop","stop_hook_active":false}`)
	unhandled := []byte(`{"session_id":"bench","transcript_path":"/tmp/bench.jsonl","cwd":"/tmp","hook_event_name":"Notification","message":"waiting","notification_type":"idle_prompt"}`)
	hook := func(payload []byte) (time.Duration, error) {
		cmd := exec.Command(bin, "--data-dir", d.Root, "hook")
		cmd.Stdin = bytes.NewReader(payload)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		took := time.Since(t0)
		if err != nil {
			err = fmt.Errorf("oz0-node hook: %w: %s", err, out.String())
		}
		return took, err
	}
	// The run the node timed for the event just answered: the newest in status.
	lastRun := func(after string) (api.HookRun, error) {
		st, err := ctl.Status(context.Background())
		if err != nil {
			return api.HookRun{}, err
		}
		if len(st.HookRuns) == 0 || st.HookRuns[0].Time == after || st.HookRuns[0].Event != "Stop" || st.HookRuns[0].Decision != "allow" {
			return api.HookRun{}, fmt.Errorf("no new Stop hook run in status: %+v", st.HookRuns)
		}
		return st.HookRuns[0], nil
	}
	// Warm-up: the first run fills the probe cache and the page cache.
	if _, err := hook(handled); err != nil {
		b.Fatal(err)
	}
	prev, err := lastRun("")
	if err != nil {
		b.Fatal(err)
	}
	var whole, run, overhead, none, binary latencies
	for range hookEventRuns {
		dw, err := hook(handled)
		if err != nil {
			b.Fatal(err)
		}
		r, err := lastRun(prev.Time)
		if err != nil {
			b.Fatal(err)
		}
		prev = r
		dr := time.Duration(r.Seconds * float64(time.Second))
		whole.add(dw)
		run.add(dr)
		overhead.add(dw - dr)
		dn, err := hook(unhandled)
		if err != nil {
			b.Fatal(err)
		}
		none.add(dn)
		t0 := time.Now()
		if err := exec.Command(bin, "version").Run(); err != nil {
			b.Fatal(err)
		}
		binary.add(time.Since(t0))
	}
	for name, l := range map[string]*latencies{"whole": &whole, "hook-run": &run, "overhead": &overhead, "unhandled": &none, "node-binary": &binary} {
		b.Run(name, func(b *testing.B) { l.report(b); b.ReportMetric(0, "ns/op") })
	}
}
