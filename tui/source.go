package tui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"

	"oz0.ai/node/node/api"
)

// Source is what the TUI reads the node through: the control API's event stream and
// its two actions. The socket implementation is the real one; tests may pass any.
type Source interface {
	// Events streams the node's events; the first is a full status. The channel
	// closes when the node goes away or ctx ends.
	Events(ctx context.Context) (<-chan api.Event, error)
	Restart(ctx context.Context, plugin, server string) error
	Logs(ctx context.Context, plugin, server string, n int) ([]string, error)
	// Follow streams a server's log lines (its recent ones first) until ctx ends
	// or the node closes the stream.
	Follow(ctx context.Context, plugin, server string) (<-chan string, error)
}

// socketSource is a Source on the node's control socket.
type socketSource struct {
	*api.Client
	socket string
	hc     *http.Client
}

// NewSocketSource returns the Source for the control socket at path.
func NewSocketSource(socket string) Source {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &socketSource{Client: api.NewClient(socket), socket: socket, hc: &http.Client{Transport: tr}}
}

// followBacklog is how many earlier lines the log pane starts with.
const followBacklog = 200

// Follow uses GET /v1/servers/{plugin}/{server}/logs?follow=1, which api.Client does
// not offer: the node writes the last lines, then each new line as it comes.
func (s *socketSource) Follow(ctx context.Context, plugin, server string) (<-chan string, error) {
	u := fmt.Sprintf("http://oz0-node/v1/servers/%s/%s/logs?follow=1&n=%d",
		url.PathEscape(plugin), url.PathEscape(server), followBacklog)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("follow %s/%s: %w", plugin, server, err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("follow %s/%s: %w (control socket %s: %v)", plugin, server, api.ErrNotRunning, s.socket, err)
		}
		return nil, fmt.Errorf("follow %s/%s: %w", plugin, server, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
		return nil, fmt.Errorf("follow %s/%s: control API: %s: %s", plugin, server, resp.Status, e.Error)
	}
	out := make(chan string, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case out <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
