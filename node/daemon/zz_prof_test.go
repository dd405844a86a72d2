package daemon_test

import (
	"sync"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

func TestZZProfStdio(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 3000 {
				call(t, cs, "unruly__echo", map[string]any{"text": "x"})
			}
		})
	}
	wg.Wait()
}
