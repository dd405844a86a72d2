package manifest

import (
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// Remote is a remote MCP server: the gateway connects to URL itself (Streamable
// HTTP for "http", SSE for "sse"); no plugin code runs for it.
type Remote struct {
	// Type is RemoteHTTP or RemoteSSE.
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Remote server types.
const (
	RemoteHTTP = "http"
	RemoteSSE  = "sse"
)

// Host returns the URL's host when it is written out, or "" when it comes from
// a ${…} value (known only once the operator's values are in).
func (r *Remote) Host() string {
	raw := r.URL
	if i := strings.Index(raw, "${"); i >= 0 {
		if _, after, ok := strings.Cut(raw[:i], "://"); !ok || !strings.ContainsAny(after, "/?#") {
			return ""
		}
		raw = refRE.ReplaceAllString(raw, "x")
	}
	u, err := ParseRemoteURL(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// ParseRemoteURL checks a remote server's URL (after expansion, or as written
// when it holds no ${…}): http or https, a host, no credentials in it.
func ParseRemoteURL(raw string) (*url.URL, error) {
	if strings.Contains(raw, "${") {
		return nil, fmt.Errorf("%q still holds a ${…} reference", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	default:
		return nil, fmt.Errorf("%q: the scheme must be http or https", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%q: no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%q: credentials in the URL would show wherever the URL does; send them in a header from a userConfig value", u.Redacted())
	}
	return u, nil
}

// CheckHeader refuses a header a remote server may not be sent: a name that is
// not an HTTP token, a value with a line break or NUL (it would end the header),
// or a header the transport owns.
func CheckHeader(name, value string) error {
	if !headerNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a header name", name)
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("the value of %s holds a line break or NUL", name)
	}
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-authorization", "proxy-connection":
		return fmt.Errorf("%s is set by the transport, not by a plugin", name)
	}
	return nil
}

var headerNameRE = lazyre.New("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// ServerID maps a server name as written to the name the node uses: a name of
// letters, digits, '_', '.' and '-' that starts with a letter or digit (at most
// 64 characters) is kept as it is; in any other, each run of other characters
// becomes one '_', leading and trailing '_', '.' and '-' are dropped, and the
// result is cut to 64 characters. "my server" → "my_server", "Sentry (EU)" →
// "Sentry_EU". It returns "" for a name with no letter or digit. Two names with
// one ID are refused at load.
func ServerID(name string) string {
	if len(name) <= 64 && serverRE.MatchString(name) {
		return name
	}
	var b strings.Builder
	under := false
	for _, r := range name {
		if r < 0x80 && (r == '_' || r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
			under = false
			continue
		}
		if !under {
			b.WriteByte('_')
			under = true
		}
	}
	id := strings.Trim(b.String(), "_.-")
	if len(id) > 64 {
		id = strings.TrimRight(id[:64], "_.-")
	}
	return id
}

// serverKeys are the server fields Claude Code defines (stdio and remote).
var serverKeys = []string{"type", "command", "args", "env", "cwd", "url", "headers", "headersHelper", "oauth"}

func sortedAnyKeys(o map[string]any) []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// serverSource is one place servers are declared.
type serverSource struct {
	file    string // the file they are in
	base    string // field prefix of a server in it ("mcpServers." or "")
	servers map[string]any
}

// loadServers reads the servers from the manifest's mcpServers (an object, a
// path, or an array of both) or else from mcp.json / .mcp.json.
func (l *loader) loadServers(top map[string]any, serverExt map[string]any) {
	var srcs []serverSource
	if v, ok := top["mcpServers"]; ok {
		items, isList := v.([]any)
		if !isList {
			items = []any{v}
		}
		for i, it := range items {
			field := "mcpServers"
			if isList {
				field = fmt.Sprintf("mcpServers[%d]", i)
			}
			switch t := it.(type) {
			case map[string]any:
				srcs = append(srcs, serverSource{file: l.m.File, base: field + ".", servers: t})
			case string:
				if s, ok := l.serverFileRef(field, t); ok {
					srcs = append(srcs, s)
				}
			default:
				l.c.add(l.m.File, field, "must be an object of servers, a path to a JSON file of servers, or an array of them")
			}
		}
	} else {
		found := ""
		for _, f := range []string{"mcp.json", ".mcp.json"} {
			_, err := fs.Lstat(l.fsys, f)
			if isNotExist(err) {
				continue
			}
			if err != nil {
				l.c.add(f, "", "%v", readErr(err))
				return
			}
			if found != "" {
				l.c.add(f, "", "both %s and %s exist; keep one", found, f)
				return
			}
			found = f
		}
		if found != "" {
			// readFile refuses what Lstat saw but cannot be read inside the folder
			// (a symlink leaving it, a FIFO, a device), rather than skipping it.
			if s, ok := l.readServerFile(found); ok {
				srcs = append(srcs, s)
			}
		}
	}

	byID := map[string]string{} // ID → name as written
	for _, src := range srcs {
		if l.m.ServersFile == "" {
			l.m.ServersFile = src.file
		}
		names := make([]string, 0, len(src.servers))
		for n := range src.servers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			field := src.base + n
			id := ServerID(n)
			switch prev, dup := byID[id]; {
			case id == "":
				l.c.add(src.file, field, "server name has no letter or digit")
				continue
			case dup && prev == n:
				l.c.add(src.file, field, "a second server named %q", n)
				continue
			case dup:
				l.c.add(src.file, field, "server names %q and %q both become %q (names are mapped to letters, digits, '_', '.' and '-'); rename one", prev, n, id)
				continue
			}
			byID[id] = n
			s := l.server(src.file, field, n, src.servers[n])
			ext, ok := serverExt[n]
			if !ok {
				ext, ok = serverExt[id]
			}
			if ok {
				l.serverExt(&s, ext)
			} else {
				s.Sandbox = SandboxDefault
			}
			l.m.Servers = append(l.m.Servers, s)
		}
	}
	sort.Slice(l.m.Servers, func(i, j int) bool { return l.m.Servers[i].Name < l.m.Servers[j].Name })
	for n := range serverExt {
		if _, ok := byID[n]; ok {
			continue
		}
		if slices.ContainsFunc(l.m.Servers, func(s Server) bool { return s.Label == n }) {
			continue
		}
		if slices.ContainsFunc(l.m.Bundles, func(b Bundle) bool { return b.Server == "" }) {
			continue // may name the server of a bundle install has not unpacked yet
		}
		l.c.add(l.m.File, "extensions.\"ai.oz0\".servers."+n, "names no server in %s", orNone(l.m.ServersFile))
	}
}

// serverFileRef resolves a string in mcpServers: an MCPB bundle (mcpb.go), or a
// JSON file inside the plugin. Another URL is refused with a reason rather than
// read as a path.
func (l *loader) serverFileRef(field, p string) (serverSource, bool) {
	lower := strings.ToLower(p)
	isURL := strings.Contains(lower, "://")
	switch {
	case isBundleRef(p):
		return l.bundleRef(field, p)
	case isURL:
		l.c.add(l.m.File, field, "%q is a URL: mcpServers names a JSON file inside the plugin folder; a remote server is declared as {\"type\": \"http\", \"url\": …}", p)
		return serverSource{}, false
	}
	rel, ok := relInside(p)
	if !ok {
		l.c.add(l.m.File, field, "%q: must be a path inside the plugin folder", p)
		return serverSource{}, false
	}
	return l.readServerFile(rel)
}

func (l *loader) readServerFile(f string) (serverSource, bool) {
	b, err := readFile(l.fsys, f)
	if err != nil {
		l.c.add(f, "", "%v", err)
		return serverSource{file: f}, false
	}
	obj, ok := decodeObject(l.c, f, b)
	if !ok {
		return serverSource{file: f}, false
	}
	// Two shapes: {"mcpServers": {...}} and the bare map of servers.
	if inner, ok := obj["mcpServers"]; ok {
		m, ok := inner.(map[string]any)
		if !ok {
			l.c.add(f, "mcpServers", "must be an object")
			return serverSource{file: f}, false
		}
		return serverSource{file: f, base: "mcpServers.", servers: m}, true
	}
	return serverSource{file: f, servers: obj}, true
}

// server reads one server entry; base is its field path.
func (l *loader) server(file, base, name string, v any) Server {
	w := walker{c: l.c, file: file}
	s := Server{Name: ServerID(name)}
	if s.Name != name {
		s.Label = name
	}
	o, ok := v.(map[string]any)
	if !ok {
		w.typeErr(base, "an object")
		return s
	}
	for _, k := range sortedAnyKeys(o) {
		if !slices.Contains(serverKeys, k) {
			l.notice(file, base+"."+k, "unknown server field; ignored")
		}
	}
	typ := ""
	if t, ok := o["type"]; ok {
		ts, ok := t.(string)
		if !ok {
			w.typeErr(base+".type", "a string")
		}
		typ = ts
	}
	_, hasURL := o["url"]
	_, hasCmd := o["command"]
	switch {
	case typ == "http" || typ == "sse" || typ == "streamable-http" || (typ == "" && hasURL && !hasCmd):
		if typ == "" {
			l.notice(file, base+".type", "no type: a server with a url is read as type \"http\" (Claude Code wants the type written)")
			typ = RemoteHTTP
		}
		if typ == "streamable-http" {
			l.notice(file, base+".type", "\"streamable-http\" is read as Claude Code's \"http\"")
			typ = RemoteHTTP
		}
		l.remote(file, base, o, typ, &s)
		return s
	case typ == "" || typ == "stdio":
	case typ == "ws":
		l.c.add(file, base+".type", "\"ws\": WebSocket servers are not supported (stdio, http or sse)")
		return s
	default:
		l.c.add(file, base+".type", "%q: must be stdio, http or sse", typ)
		return s
	}
	if hasURL {
		l.c.add(file, base+".url", "a stdio server has a command, not a url (a remote server needs \"type\": \"http\" or \"sse\")")
	}
	s.Command = w.strAt(o, base, "command", true)
	l.checkString(file, base+".command", s.Command, true)
	if av, ok := o["args"]; ok {
		s.Args = w.strings(av, base+".args")
		for i, a := range s.Args {
			l.checkString(file, fmt.Sprintf("%s.args[%d]", base, i), a, true)
		}
	}
	s.Env = l.stringMap(file, base+".env", o, "env", func(k string) error {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("not a valid environment variable name")
		}
		return nil
	})
	s.Cwd = w.strAt(o, base, "cwd", false)
	if s.Cwd != "" {
		l.refsIn(file, base+".cwd", s.Cwd)
		if !strings.HasPrefix(s.Cwd, "${") {
			if _, ok := relInside(s.Cwd); !ok {
				l.c.add(file, base+".cwd", "%q: must be a folder inside the plugin folder", s.Cwd)
			}
		} else {
			checkEscape(l.c, file, base+".cwd", s.Cwd)
		}
	}
	for _, k := range []string{"headers", "headersHelper", "oauth"} {
		if _, ok := o[k]; ok {
			l.c.add(file, base+"."+k, "belongs to a remote server; this one is stdio")
		}
	}
	return s
}

func (l *loader) remote(file, base string, o map[string]any, typ string, s *Server) {
	w := walker{c: l.c, file: file}
	for _, k := range []string{"command", "args", "env", "cwd"} {
		if _, ok := o[k]; ok {
			l.c.add(file, base+"."+k, "a remote server has a url, not a %s: no plugin code runs for it", k)
		}
	}
	r := &Remote{Type: typ, URL: w.strAt(o, base, "url", true)}
	if r.URL != "" {
		refs := l.refsIn(file, base+".url", r.URL)
		if len(refs) == 0 {
			if u, err := ParseRemoteURL(r.URL); err != nil {
				l.c.add(file, base+".url", "%v", err)
			} else {
				l.lintRemoteURL(file, base+".url", u)
			}
		} else {
			l.templatedURL(file, base+".url", r.URL)
		}
	}
	r.Headers = l.stringMap(file, base+".headers", o, "headers", func(k string) error {
		return CheckHeader(k, "")
	})
	for k, v := range r.Headers {
		if err := CheckHeader(k, v); err != nil {
			l.c.add(file, base+".headers."+k, "%v", err)
		}
	}
	if _, ok := o["headersHelper"]; ok {
		l.notice(file, base+".headersHelper", "headersHelper runs a command on the agent's host to make headers; the node never runs it (give headers from userConfig values instead)")
	}
	if _, ok := o["oauth"]; ok {
		l.notice(file, base+".oauth", "the node does not sign in with OAuth for a remote server; a server that needs it fails to connect")
	}
	s.Remote = r
}

// templatedURL checks a URL that holds ${…} references as far as its text allows:
// no credentials in its authority, and a known scheme and host once the
// references are filled with a plain word.
func (l *loader) templatedURL(file, field, raw string) {
	authority := raw
	if _, after, ok := strings.Cut(raw, "://"); ok {
		authority = after
	}
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if strings.Contains(authority, "@") {
		l.c.add(file, field, "credentials in the URL would show wherever the URL does; send them in a header from a userConfig value")
		return
	}
	prefix := raw[:strings.Index(raw, "${")]
	if _, after, ok := strings.Cut(prefix, "://"); !ok || !strings.ContainsAny(after, "/?#") {
		l.notice(file, field, "the host comes from a config value: the egress decision and the SSRF guard apply to it once the value is set")
		return
	}
	filled := refRE.ReplaceAllString(raw, "x")
	if u, err := ParseRemoteURL(filled); err != nil {
		l.c.add(file, field, "%v", err)
	} else {
		l.lintRemoteURL(file, field, u)
	}
}

func (l *loader) lintRemoteURL(file, field string, u *url.URL) {
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
			l.notice(file, field, "%s is a loopback, private or link-local address: the egress guard refuses it unless the operator allows that range", host)
		}
	} else if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		l.notice(file, field, "%s is loopback: the egress guard refuses it unless the operator allows that range", host)
	}
	if strings.EqualFold(u.Scheme, "http") {
		l.notice(file, field, "plain http: headers and tool calls travel unencrypted")
	}
}

// stringMap reads o[key] as an object of strings, checking each key with keyOK
// and each value's ${…} references.
func (l *loader) stringMap(file, field string, o map[string]any, key string, keyOK func(string) error) map[string]string {
	w := walker{c: l.c, file: file}
	ev, ok := w.objAt(o, strings.TrimSuffix(field, "."+key), key, false)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, val := range ev {
		f := field + "." + k
		if err := keyOK(k); err != nil {
			l.c.add(file, f, "%v", err)
			continue
		}
		vs, ok := val.(string)
		if !ok || strings.ContainsRune(vs, 0) {
			w.typeErr(f, "a string")
			continue
		}
		l.refsIn(file, f, vs)
		out[k] = vs
	}
	return out
}

func (l *loader) serverExt(s *Server, v any) {
	w := walker{c: l.c, file: l.m.File}
	base := "extensions.\"ai.oz0\".servers." + s.DisplayName()
	o, ok := v.(map[string]any)
	if !ok {
		w.typeErr(base, "an object")
		return
	}
	w.unknownKeys(o, base, "sandbox", "reason", "egress", "limits")
	switch sb := w.strAt(o, base, "sandbox", false); sb {
	case "", "default":
		s.Sandbox = SandboxDefault
	case "host", "own":
		s.Sandbox = SandboxKind(sb)
	default:
		l.c.add(l.m.File, base+".sandbox", "%q: must be default, host or own", sb)
		s.Sandbox = SandboxDefault
	}
	s.Reason = w.strAt(o, base, "reason", false)
	if ev, ok := o["egress"]; ok {
		s.Egress = w.egress(ev, base+".egress")
		if s.Egress == nil {
			s.Egress = []EgressEntry{}
		}
	}
	if lv, ok := w.objAt(o, base, "limits", false); ok {
		s.Limits = w.limits(lv, base+".limits")
	}
	if s.Remote != nil && (s.Sandbox != SandboxDefault || s.Limits != (Limits{})) {
		l.notice(l.m.File, base, "server %q is remote: no plugin code runs for it, so sandbox and limits do not apply", s.DisplayName())
		s.Sandbox, s.Limits = SandboxDefault, Limits{}
	}
}
