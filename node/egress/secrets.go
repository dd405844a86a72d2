package egress

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/netrule"
)

// Secrets stay outside the sandbox (docs/promises.md §17): a value marked secret
// reaches the tool as a sentinel, and the proxy puts the real value in, in place
// of the sentinel, only on requests to the hosts the secret is bound to — in
// request header values (Basic credentials decoded and encoded again) and the
// URL's query, and in the body only where the manifest asks. A sentinel of the
// plugin seen anywhere else (another host, another server's endpoint, the
// target of a CONNECT) refuses the request: that is an attempt to send the secret
// elsewhere, audited and raised as a finding.

// SentinelPrefix starts every sentinel (egressrule.SentinelPrefix).
const SentinelPrefix = egressrule.SentinelPrefix

// Sentinel is the string a tool sees in place of a secret (egressrule.Sentinel).
func Sentinel(plugin, server, key string) string { return egressrule.Sentinel(plugin, server, key) }

// Secret is one value the proxy puts in for its sentinel (egressrule.Secret).
type Secret = egressrule.Secret

// compiledSecret is a Secret with its host patterns parsed.
type compiledSecret struct {
	Secret
	hosts []netrule.Pattern
}

func compileSecrets(plugin string, ss []Secret) ([]*compiledSecret, error) {
	var out []*compiledSecret
	seen := map[string]bool{}
	for _, s := range ss {
		switch {
		case s.Key == "":
			return nil, fmt.Errorf("plugin %s: a secret without a key", plugin)
		case !strings.HasPrefix(s.Sentinel, SentinelPrefix) || len(s.Sentinel) < len(SentinelPrefix)+16:
			return nil, fmt.Errorf("plugin %s: secret %s: sentinel %q is not one", plugin, s.Key, s.Sentinel)
		case s.Value == "" || strings.Contains(s.Value, s.Sentinel):
			return nil, fmt.Errorf("plugin %s: secret %s: no value to put in", plugin, s.Key)
		case seen[s.Sentinel]:
			return nil, fmt.Errorf("plugin %s: secret %s: sentinel given twice", plugin, s.Key)
		}
		seen[s.Sentinel] = true
		cs := &compiledSecret{Secret: s}
		for _, h := range s.Hosts {
			p, err := netrule.ParsePattern(h)
			if err != nil {
				return nil, fmt.Errorf("plugin %s: secret %s: host %q: %w", plugin, s.Key, h, err)
			}
			cs.hosts = append(cs.hosts, p)
		}
		out = append(out, cs)
	}
	return out, nil
}

// where names the secret for audit lines and findings: its key and whose.
func (s *compiledSecret) where() string {
	if s.Server == "" {
		return s.Key + " (the plugin's hooks)"
	}
	return s.Key + " (server " + s.Server + ")"
}

// boundTo reports whether s is put in on a request from the endpoint of server
// to t. The connection itself was allowed by the lists (decide); the manifest's
// hosts narrow that further.
func (s *compiledSecret) boundTo(server string, t Target) bool {
	if s.Server != server {
		return false
	}
	if len(s.hosts) == 0 {
		return true
	}
	return firstMatch(s.hosts, t.Host, t.Port) >= 0
}

// boundSecrets are the secrets the endpoint of server puts in on t.
func (r *compiled) boundSecrets(server string, t Target) []*compiledSecret {
	var out []*compiledSecret
	for _, s := range r.secrets {
		if s.boundTo(server, t) {
			out = append(out, s)
		}
	}
	return out
}

// hasSecrets reports whether the endpoint of server puts any secret in on t:
// only then is a connection to t intercepted.
func (r *compiled) hasSecrets(server string, t Target) bool {
	for _, s := range r.secrets {
		if s.boundTo(server, t) {
			return true
		}
	}
	return false
}

// sentinelsIn are the plugin's secrets whose sentinel occurs in text.
func (r *compiled) sentinelsIn(text string) []*compiledSecret {
	if len(r.secrets) == 0 || !strings.Contains(text, SentinelPrefix) {
		return nil
	}
	var out []*compiledSecret
	for _, s := range r.secrets {
		if strings.Contains(text, s.Sentinel) {
			out = append(out, s)
		}
	}
	return out
}

// scrub replaces every secret value in text (an upstream error that quotes the
// URL it was sent to, say) by the secret's name, so no log, audit line or answer
// to the sandbox carries one.
func (r *compiled) scrub(text string) string {
	for _, s := range r.secrets {
		text = strings.ReplaceAll(text, s.Value, "[secret "+s.Key+"]")
		if q := url.QueryEscape(s.Value); q != s.Value {
			text = strings.ReplaceAll(text, q, "[secret "+s.Key+"]")
		}
	}
	return text
}

// putIn is what one request carries: the secrets to put in, or the first
// sentinel that may not go where the request goes.
type putIn struct {
	put   []*compiledSecret
	stray *compiledSecret
}

// inRequest finds the plugin's sentinels in a request's header names and values
// (Basic credentials decoded), its URL (path, query, user info) and its Host,
// and sorts them: bound here (put in), or not (the request is refused).
func (r *compiled) inRequest(server string, t Target, h http.Header, u *url.URL, host string) putIn {
	var found []*compiledSecret
	add := func(text string) {
		for _, s := range r.sentinelsIn(text) {
			if !slices.Contains(found, s) {
				found = append(found, s)
			}
		}
	}
	if len(r.secrets) == 0 {
		return putIn{}
	}
	for k, vs := range h {
		add(k)
		for _, v := range vs {
			add(v)
			if dec, ok := basicDecoded(v); ok {
				add(dec)
			}
		}
	}
	if u != nil {
		add(u.String())
		add(u.RawQuery)
		if p, err := url.PathUnescape(u.EscapedPath()); err == nil {
			add(p)
		}
		if q, err := url.QueryUnescape(u.RawQuery); err == nil {
			add(q)
		}
	}
	add(host)
	var out putIn
	for _, s := range found {
		if !s.boundTo(server, t) {
			out.stray = s
			return out
		}
		out.put = append(out.put, s)
	}
	return out
}

// basicDecoded decodes the credentials of "Basic …" (user:password).
func basicDecoded(v string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// apply puts the secrets in: every header value (Basic credentials decoded,
// replaced and encoded again) and the URL's query (the value query-escaped).
// The path is left as it is.
func (pi putIn) apply(h http.Header, u *url.URL) {
	if len(pi.put) == 0 {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			if dec, ok := basicDecoded(v); ok && strings.Contains(dec, SentinelPrefix) {
				for _, s := range pi.put {
					dec = strings.ReplaceAll(dec, s.Sentinel, s.Value)
				}
				scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
				vs[i] = scheme + " " + base64.StdEncoding.EncodeToString([]byte(dec))
				continue
			}
			for _, s := range pi.put {
				v = strings.ReplaceAll(v, s.Sentinel, s.Value)
			}
			vs[i] = v
		}
		h[k] = vs
	}
	if u != nil && strings.Contains(u.RawQuery, SentinelPrefix) {
		q := u.RawQuery
		for _, s := range pi.put {
			q = strings.ReplaceAll(q, s.Sentinel, url.QueryEscape(s.Value))
		}
		u.RawQuery = q
	}
}

// narrowEncodings has a request that carries a secret ask only for bodies the
// proxy can read, as its answer is checked for the secret (scrubResponse).
func narrowEncodings(h http.Header) {
	h.Set("Accept-Encoding", readableEncodings(h.Values("Accept-Encoding")))
}

// readableEncodings is an Accept-Encoding with only what the proxy can decode
// to check a response for a secret: gzip, deflate and identity.
func readableEncodings(asked []string) string {
	var keep []string
	for _, v := range asked {
		for _, part := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "gzip", "x-gzip", "deflate", "identity":
				keep = append(keep, strings.TrimSpace(part))
			}
		}
	}
	if len(keep) == 0 {
		return "identity"
	}
	return strings.Join(keep, ", ")
}

// keys names what was put in, for the audit line.
func (pi putIn) keys() string {
	var ks []string
	for _, s := range pi.put {
		ks = append(ks, s.where())
	}
	return strings.Join(ks, ", ")
}

// bodySecrets are the secrets of server that go into request bodies to t.
func (r *compiled) bodySecrets(server string, t Target) []*compiledSecret {
	var out []*compiledSecret
	for _, s := range r.secrets {
		if s.Body && s.boundTo(server, t) {
			out = append(out, s)
		}
	}
	return out
}

// maxBuffered is how much of a body whose secrets change its length is held to
// give it an exact length; a longer one is sent with none (chunked).
const maxBuffered = 8 << 20

// replacing rewrites a body, replacing each old with its new, and returns it
// with its length: exact when the body (n bytes, -1 unknown) was at most
// maxBuffered, else -1.
func replacing(body io.ReadCloser, n int64, old, new [][]byte) (io.ReadCloser, int64, error) {
	if body == nil || body == http.NoBody {
		return body, n, nil
	}
	head, err := io.ReadAll(io.LimitReader(body, maxBuffered+1))
	if err != nil {
		return nil, 0, err
	}
	if len(head) <= maxBuffered {
		body.Close()
		for i := range old {
			head = bytes.ReplaceAll(head, old[i], new[i])
		}
		return io.NopCloser(bytes.NewReader(head)), int64(len(head)), nil
	}
	rr := &replaceReader{src: io.MultiReader(bytes.NewReader(head), body), old: old, new: new}
	return struct {
		io.Reader
		io.Closer
	}{rr, body}, -1, nil
}

// replaceReader replaces each old with its new in a stream, across reads: it
// holds back the last bytes that could begin a match.
type replaceReader struct {
	src      io.Reader
	old, new [][]byte
	chunk    []byte
	buf      []byte // read, not yet scanned
	out      []byte // scanned, not yet returned
	outAt    int
	eof      bool
	err      error
}

func (r *replaceReader) Read(p []byte) (int, error) {
	for r.outAt == len(r.out) {
		if r.eof && len(r.buf) == 0 {
			return 0, r.err
		}
		if !r.eof {
			if r.chunk == nil {
				r.chunk = make([]byte, 64<<10)
			}
			n, err := r.src.Read(r.chunk)
			r.buf = append(r.buf, r.chunk[:n]...)
			if err != nil {
				r.eof, r.err = true, err
			}
		}
		r.out, r.outAt = r.out[:0], 0
		r.scan()
	}
	n := copy(p, r.out[r.outAt:])
	r.outAt += n
	return n, nil
}

// scan moves what is certain from buf to out: text up to each complete match,
// then the match's replacement; of the rest, all but the bytes that could still
// begin a match once more arrives.
func (r *replaceReader) scan() {
	rest := r.buf
	for {
		at, which := -1, -1
		for i, o := range r.old {
			if j := bytes.Index(rest, o); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			break
		}
		r.out = append(r.out, rest[:at]...)
		r.out = append(r.out, r.new[which]...)
		rest = rest[at+len(r.old[which]):]
	}
	keep := 0
	if !r.eof {
		for _, o := range r.old {
			keep = max(keep, len(o)-1)
		}
	}
	keep = min(keep, len(rest))
	r.out = append(r.out, rest[:len(rest)-keep]...)
	r.buf = append(r.buf[:0], rest[len(rest)-keep:]...)
}

// stray counts the sentinels of one plugin's server (or its hooks) sent where
// their secret is not bound: the finding an operator sees.
type stray struct {
	subject string
	keys    map[string]bool
	hosts   map[string]bool
	count   int64
	last    time.Time
}

func (st *stray) finding() api.Finding {
	keys, hosts := slices.Sorted(maps.Keys(st.keys)), slices.Sorted(maps.Keys(st.hosts))
	return api.Finding{Code: api.CodeSecretSentElsewhere, Severity: api.SevError, Subject: st.subject,
		Message: fmt.Sprintf("%s sent the sentinel of its secret %s to %s, where the secret is not bound (%s): an attempt to send the secret elsewhere. "+
			"Each request was refused; the real value never left the node.", st.subject, strings.Join(keys, ", "), strings.Join(hosts, ", "), times(st.count)),
		Fix:  "find out why the plugin sends its credential there (each refusal is a deny line of kind egress in the audit stream: oz0-node audit); remove the plugin if it should not, or have its manifest bind the secret to that host (extensions.\"ai.oz0\".secrets)",
		Time: st.last.UTC().Format(time.RFC3339)}
}

// straySentinel logs and raises the finding of a sentinel sent where its
// secret is not bound.
func (p *Proxy) straySentinel(s *session, t Target, sec *compiledSecret) {
	subject := s.plugin.name
	if s.server != "" {
		subject += "/" + s.server
	}
	p.log.Warn("egress: a sandbox sent a secret's sentinel where the secret is not bound; refused",
		"plugin", s.plugin.name, "server", s.server, "secret", sec.where(), "host", t.String())
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.strays[subject]
	if st == nil {
		st = &stray{subject: subject, keys: map[string]bool{}, hosts: map[string]bool{}}
		p.strays[subject] = st
	}
	st.keys[sec.Key] = true
	if len(st.hosts) < 16 {
		st.hosts[t.String()] = true
	}
	st.count++
	st.last = time.Now()
}

func times(n int64) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
