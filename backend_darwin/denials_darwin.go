package backenddarwin

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"syscall"

	"oz0.ai/node/node/sandbox"
)

// LogTool is macOS's unified log client, always by its absolute path.
const LogTool = "/usr/bin/log"

// FollowDenials runs `log stream` on this node's Seatbelt violation reports until
// ctx ends, handing each denial to add. It returns when the stream ends.
func FollowDenials(ctx context.Context, add func(Denial)) error {
	cmd := exec.CommandContext(ctx, LogTool, LogStreamArgs()...)
	cmd.Env = []string{"PATH=" + sandbox.MinimalPath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("follow sandbox denials: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("follow sandbox denials: start %s: %w", LogTool, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if d, ok := ParseDenial(sc.Bytes()); ok {
			add(d)
		}
	}
	if err := cmd.Wait(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("follow sandbox denials: %s stream: %w", LogTool, err)
	}
	return nil
}
