package mcpdoor

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
)

// fastHTTP answers a caller's tools/call POST on the gateway's fast path when it
// can, and hands every other request, and every one it is unsure of, to the SDK's
// handler (next) as it came. The checks the SDK makes of a POST are made first;
// where one fails, next answers it.
type fastHTTP struct {
	gw   *gateway.Gateway
	next http.Handler
	// touch is how often one of a session's calls still takes the SDK's path:
	// the SDK ends a session idle for its timeout, and only its own requests
	// tell it that the session is in use.
	touch time.Duration
	mu    sync.Mutex
	slow  map[string]time.Time // session id → when a call last took the SDK's path
}

// maxBody is the SDK's bound on a POST's body (its handler is given no other):
// a body over it is handed to the SDK, which refuses it, before more of it is
// read.
const maxBody = mcp.DefaultMaxRequestBodyBytes

func newFastHTTP(gw *gateway.Gateway, next http.Handler, idle time.Duration) *fastHTTP {
	return &fastHTTP{gw: gw, next: next, touch: min(idle/4, time.Minute), slow: map[string]time.Time{}}
}

func (f *fastHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ss, ok := f.eligible(r)
	if !ok {
		f.next.ServeHTTP(w, r)
		return
	}
	body, readErr := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	r.Body.Close()
	// Whatever is not one tools/call goes to the SDK, with the body as read and
	// the error its reading met (not a later one of the fast path's own).
	replay := func() {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{readErr}))
		f.next.ServeHTTP(w, r)
	}
	if readErr != nil || len(body) > maxBody || !bytes.Contains(body, []byte(`"tools/call"`)) {
		replay()
		return
	}
	msg, err := gateway.DecodeMessage(body)
	req, isReq := msg.(*jsonrpc.Request)
	if err != nil || !isReq {
		replay()
		return
	}
	fc, ok := f.gw.Fast(ss, req)
	if !ok {
		replay()
		return
	}
	// The keys as written are canonical: set without canonicalising them again.
	h := w.Header()
	h["Mcp-Session-Id"] = []string{ss.ID()}
	// A call whose caller asked for its progress is answered as an event
	// stream once progress comes: the progress, then the answer, in order on
	// the one stream (not on the session's GET stream, which the caller reads
	// apart and may not have opened).
	var stream *progressStream
	if fc.WantsProgress() {
		stream = &progressStream{w: w}
		fc.ProgressTo(stream.progress)
	}
	resp := fc.Run(r.Context())
	if stream != nil && stream.finish() {
		if resp != nil {
			if out, err := gateway.AppendResponse(nil, resp); err == nil {
				stream.event(out)
			}
		}
		return
	}
	if resp == nil {
		// Cancelled: no answer is due.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	out, err := gateway.AppendResponse(make([]byte, 0, len(resp.Result)+64), resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h["Content-Type"] = []string{"application/json"}
	w.Write(out)
}

// progressStream writes a fast call's progress as the events of an event
// stream answering its POST, the stream begun at the first; the answer follows
// as its last event.
type progressStream struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	started bool
	done    bool // the call has answered: later progress is dropped
}

func (s *progressStream) progress(p *mcp.ProgressNotificationParams) {
	params, err := json.Marshal(p)
	if err != nil {
		return
	}
	msg, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: params})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if !s.started {
		s.w.Header()["Content-Type"] = []string{"text/event-stream"}
		s.w.Header()["Cache-Control"] = []string{"no-cache"}
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	s.event(msg)
}

// event writes one message event and flushes it to the caller.
func (s *progressStream) event(msg []byte) {
	b := make([]byte, 0, len(msg)+24)
	b = append(b, "event: message\ndata: "...)
	// A stdio server's message is one line; should one hold a newline, each of
	// its lines is a data line of the one event.
	b = append(b, bytes.ReplaceAll(msg, []byte("\n"), []byte("\ndata: "))...)
	b = append(b, "\n\n"...)
	s.w.Write(b)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// finish ends the progress and reports whether the answer is due as the
// stream's last event (some progress came) rather than as JSON.
func (s *progressStream) finish() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	return s.started
}

// supportedVersions are the protocol revisions the SDK speaks (it returns a
// new copy at each ask).
var supportedVersions = mcp.SupportedProtocolVersions()

// eligible says whether r may take the fast path, and its session: a POST to an
// initialised session that passes every check the SDK makes of one, and not the
// one call in a while that keeps the session alive in the SDK.
func (f *fastHTTP) eligible(r *http.Request) (*mcp.ServerSession, bool) {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil, false
	}
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		return nil, false
	}
	// The SDK's rebinding guard: a loopback listener answers only loopback hosts.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && isLoopback(la.String()) && !isLoopback(r.Host) {
		return nil, false
	}
	// The SDK's stateful handler refuses calls under the per-request protocol
	// (gateway.PerRequestProtocol and later), which it supports only when stateless.
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && (!slices.Contains(supportedVersions, v) || v >= gateway.PerRequestProtocol) {
		return nil, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" { // as clients send it: no parse
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, false
		}
	}
	if !acceptsBoth(r.Header.Values("Accept")) {
		return nil, false
	}
	ss := f.gw.Session(id)
	if ss == nil {
		return nil, false
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if last, ok := f.slow[id]; !ok || now.Sub(last) >= f.touch {
		if len(f.slow) > 4096 {
			for k, t := range f.slow {
				if now.Sub(t) >= f.touch {
					delete(f.slow, k)
				}
			}
		}
		f.slow[id] = now
		return nil, false
	}
	return ss, true
}

// acceptsBoth: the SDK answers a POST only if its Accept takes both JSON and an
// event stream.
func acceptsBoth(values []string) bool {
	var j, s bool
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				j = true
			case "text/event-stream", "text/*":
				s = true
			case "*/*":
				j, s = true, true
			}
		}
	}
	return j && s
}

// isLoopback reports whether a host[:port] names the loopback.
func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bySession hands a request to the handler of the protocol revision it speaks:
// one without a session that names a per-request revision to sessionless, every
// other (a session's, an initialize, a revision the node does not speak, which it
// refuses) to sessions.
func bySession(sessions, sessionless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == "" {
			if v := r.Header.Get("Mcp-Protocol-Version"); v >= gateway.PerRequestProtocol && slices.Contains(supportedVersions, v) {
				sessionless.ServeHTTP(w, r)
				return
			}
		}
		sessions.ServeHTTP(w, r)
	})
}

// errReader ends a replayed body with the error its reading met, if any.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
