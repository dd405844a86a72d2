package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"oz0.ai/node/node/netrule"
)

// MaxFileSize bounds every manifest file read; plugin metadata is never this large.
const MaxFileSize = 1 << 20

// Options change how a plugin folder is judged.
type Options struct {
	// FirstParty allows the reserved namespace (the source is the platform's own).
	FirstParty bool
}

// ReservedNames cannot be plugin names: they collide with the node's own words or
// folders.
var ReservedNames = []string{"oz0", "oz0-node", "node", "ai-oz0", "all", "none", "current",
	"host", "system", "root", "default", "plugins", "tenant", "run", "logs", "homes"}

var (
	nameRE      = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	namespaceRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+(-[a-z0-9]+)*)+$`)
	serverRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	envKeyRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	placeRE     = regexp.MustCompile(`\$\{([^}]*)\}`)
)

// Load reads and validates the plugin in dir. On failure the error is an Errors
// listing every problem found, each naming its file and field.
func Load(dir string, opts Options) (*Manifest, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open plugin folder %s: %w", dir, err)
	}
	defer root.Close()
	return LoadFS(pluginFS{StatFS: root.FS().(fs.StatFS), root: root}, opts)
}

// pluginFS opens files in the plugin folder without blocking: a FIFO swapped in
// after the type check opens at once, and the check on the opened file refuses it.
type pluginFS struct {
	fs.StatFS
	root *os.Root
}

func (p pluginFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return p.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// LoadFS reads a plugin from fsys (an os.Root's FS in production: it refuses paths
// that leave the folder).
func LoadFS(fsys fs.FS, opts Options) (*Manifest, error) {
	c := &collector{}
	m := &Manifest{}

	file, raw := "", []byte(nil)
	for _, cand := range []struct{ file, layout string }{
		{"plugin.json", "agent-plugins"}, {".claude-plugin/plugin.json", "claude-code"},
	} {
		b, err := readFile(fsys, cand.file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			c.add(cand.file, "", "%v", err)
			return nil, c.err()
		}
		if file != "" {
			c.add(cand.file, "", "both %s and %s exist; keep one", file, cand.file)
			return nil, c.err()
		}
		file, raw, m.Layout = cand.file, b, cand.layout
	}
	if file == "" {
		c.add("plugin.json", "", "no plugin.json or .claude-plugin/plugin.json in the plugin folder")
		return nil, c.err()
	}
	m.File = file
	top, ok := decodeObject(c, file, raw)
	if !ok {
		return nil, c.err()
	}
	w := walker{c: c, file: file}
	m.Name = w.str(top, "name", true)
	m.Version = w.str(top, "version", false)
	m.Description = w.str(top, "description", false)
	m.Author = w.author(top)
	checkName(c, file, m.Name)

	var ext map[string]any
	if exts, ok := w.obj(top, "extensions", false); ok {
		ext, _ = w.objAt(exts, "extensions", ReservedNamespace, false)
	}
	var serverExt map[string]any
	if ext != nil {
		base := "extensions.\"ai.oz0\""
		w.unknownKeys(ext, base, "namespace", "egress", "servers", "isolation")
		m.Namespace = w.strAt(ext, base, "namespace", false)
		if m.Namespace != "" {
			switch {
			case !namespaceRE.MatchString(m.Namespace):
				c.add(file, base+".namespace", "%q: must be dotted lower-case words such as com.example", m.Namespace)
			case (m.Namespace == ReservedNamespace || strings.HasPrefix(m.Namespace, ReservedNamespace+".")) && !opts.FirstParty:
				c.add(file, base+".namespace", "%q is reserved for first-party plugins", m.Namespace)
			}
		}
		m.Isolation = w.strAt(ext, base, "isolation", false)
		if m.Isolation != "" && m.Isolation != IsolationGVisor {
			c.add(file, base+".isolation", "%q: must be \"gvisor\" or absent", m.Isolation)
		}
		if v, ok := ext["egress"]; ok {
			m.Egress = w.egress(v, base+".egress")
		}
		serverExt, _ = w.objAt(ext, base, "servers", false)
	}

	// MCP servers: inline in the manifest, or mcp.json / .mcp.json.
	servers, sfile, sbase := loadServers(c, fsys, top, file)
	m.ServersFile = sfile
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := w.withFile(sfile).server(sbase, n, servers[n])
		if ext, ok := serverExt[n]; ok {
			w.serverExt(&s, n, ext)
		} else {
			s.Sandbox = SandboxDefault
		}
		m.Servers = append(m.Servers, s)
	}
	for n := range serverExt {
		if _, ok := servers[n]; !ok {
			c.add(file, "extensions.\"ai.oz0\".servers."+n, "names no server in %s", orNone(sfile))
		}
	}

	m.Hooks, m.HooksFile = loadHooks(c, fsys, top, file)

	checkPlaceholdersAndPaths(c, m, sbase)
	if err := c.err(); err != nil {
		return nil, err
	}
	return m, nil
}

func orNone(s string) string {
	if s == "" {
		return "the plugin (it has no mcp.json)"
	}
	return s
}

func checkName(c *collector, file, name string) {
	switch {
	case name == "":
	case len(name) > 64:
		c.add(file, "name", "longer than 64 characters")
	case !nameRE.MatchString(name):
		c.add(file, "name", "%q: must be kebab-case (lower-case letters, digits and single hyphens)", name)
	case slices.Contains(ReservedNames, name):
		c.add(file, "name", "%q is reserved", name)
	}
}

// readErr words an os.Root refusal for a plugin author; other errors pass through.
func readErr(err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) && strings.Contains(err.Error(), "escapes") {
		return errors.New("leaves the plugin folder (a symlink pointing outside it); refused")
	}
	return err
}

// readFile reads a regular file of bounded size; devices, FIFOs and folders are refused
// before they are opened (opening a FIFO would block).
func readFile(fsys fs.FS, name string) ([]byte, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, readErr(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Check what was opened, not only what was there a moment ago.
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	return b, nil
}

func decodeObject(c *collector, file string, raw []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		c.add(file, "", "invalid JSON: %v", err)
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		c.add(file, "", "invalid JSON: data after the top-level value")
		return nil, false
	}
	obj, ok := v.(map[string]any)
	if !ok {
		c.add(file, "", "must be a JSON object")
		return nil, false
	}
	for _, d := range duplicateKeys(raw) {
		c.add(file, d, "duplicate key (a second server, hook or field of the same name)")
	}
	return obj, true
}

// duplicateKeys lists the field paths of keys that appear twice in one object;
// encoding/json would silently keep the last, hiding e.g. a second server "db".
func duplicateKeys(raw []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		obj    bool
		path   string
		seen   map[string]bool
		key    string
		expect bool // in an object, the next string token is a key
		index  int
	}
	var stack []*frame
	var dups []string
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.obj {
			return join(f.path, f.key)
		}
		p := fmt.Sprintf("%s[%d]", f.path, f.index)
		f.index++
		return p
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return dups
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				p := child()
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &frame{obj: t == '{', path: p, seen: map[string]bool{}, expect: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].expect = true
				}
			}
		default:
			if top != nil && top.obj && top.expect {
				k, _ := t.(string)
				if top.seen[k] {
					dups = append(dups, join(top.path, k))
				}
				top.seen[k] = true
				top.key = k
				top.expect = false
				continue
			}
			if top != nil && top.obj {
				top.expect = true
			} else if top != nil {
				top.index++
			}
		}
	}
}

// loadServers returns the servers, the file they are in and the field path prefix
// of a server in it ("mcpServers." or "" for a bare map).
func loadServers(c *collector, fsys fs.FS, top map[string]any, file string) (map[string]any, string, string) {
	w := walker{c: c, file: file}
	if v, ok := top["mcpServers"]; ok {
		switch t := v.(type) {
		case map[string]any:
			return t, file, "mcpServers."
		case string:
			rel, ok := relInside(t)
			if !ok {
				c.add(file, "mcpServers", "%q: must be a path inside the plugin folder", t)
				return nil, "", ""
			}
			return readServerFile(c, fsys, rel)
		default:
			w.typeErr("mcpServers", "an object or a path")
			return nil, "", ""
		}
	}
	found := ""
	for _, f := range []string{"mcp.json", ".mcp.json"} {
		_, err := fs.Lstat(fsys, f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			c.add(f, "", "%v", readErr(err))
			return nil, f, ""
		}
		if found != "" {
			c.add(f, "", "both %s and %s exist; keep one", found, f)
			return nil, f, ""
		}
		found = f
	}
	if found == "" {
		return nil, "", ""
	}
	// readFile refuses what Lstat saw but cannot be read inside the folder (a
	// symlink leaving it, a FIFO, a device), rather than skipping it silently.
	return readServerFile(c, fsys, found)
}

func readServerFile(c *collector, fsys fs.FS, f string) (map[string]any, string, string) {
	b, err := readFile(fsys, f)
	if err != nil {
		c.add(f, "", "%v", err)
		return nil, f, ""
	}
	obj, ok := decodeObject(c, f, b)
	if !ok {
		return nil, f, ""
	}
	// Two shapes: {"mcpServers": {...}} and the bare map of servers.
	if inner, ok := obj["mcpServers"]; ok {
		m, ok := inner.(map[string]any)
		if !ok {
			c.add(f, "mcpServers", "must be an object")
			return nil, f, ""
		}
		return m, f, "mcpServers."
	}
	return obj, f, ""
}

func loadHooks(c *collector, fsys fs.FS, top map[string]any, file string) ([]Hook, string) {
	var obj map[string]any
	hfile := ""
	if v, ok := top["hooks"]; ok {
		switch t := v.(type) {
		case map[string]any:
			obj, hfile = t, file
		case string:
			rel, ok := relInside(t)
			if !ok {
				c.add(file, "hooks", "%q: must be a path inside the plugin folder", t)
				return nil, ""
			}
			hfile = rel
		default:
			c.add(file, "hooks", "must be an object or a path")
			return nil, ""
		}
	} else if _, err := fs.Lstat(fsys, "hooks/hooks.json"); err == nil {
		hfile = "hooks/hooks.json"
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.add("hooks/hooks.json", "", "%v", readErr(err))
		return nil, "hooks/hooks.json"
	}
	if obj == nil && hfile != "" {
		b, err := readFile(fsys, hfile)
		if err != nil {
			c.add(hfile, "", "%v", err)
			return nil, hfile
		}
		o, ok := decodeObject(c, hfile, b)
		if !ok {
			return nil, hfile
		}
		obj = o
	}
	if obj == nil {
		return nil, ""
	}
	w := walker{c: c, file: hfile}
	base := ""
	if inner, ok := obj["hooks"]; ok {
		m, ok := inner.(map[string]any)
		if !ok {
			c.add(hfile, "hooks", "must be an object of events")
			return nil, hfile
		}
		obj, base = m, "hooks."
	}
	events := make([]string, 0, len(obj))
	for e := range obj {
		events = append(events, e)
	}
	sort.Strings(events)
	var hooks []Hook
	for _, ev := range events {
		field := base + ev
		if !slices.Contains(HookEvents, ev) {
			c.add(hfile, field, "unknown hook event (known: %s)", strings.Join(HookEvents, ", "))
			continue
		}
		groups, ok := obj[ev].([]any)
		if !ok {
			c.add(hfile, field, "must be an array of matcher groups")
			continue
		}
		for gi, g := range groups {
			gf := fmt.Sprintf("%s[%d]", field, gi)
			gm, ok := g.(map[string]any)
			if !ok {
				c.add(hfile, gf, "must be an object")
				continue
			}
			matcher := w.strAt(gm, gf, "matcher", false)
			if matcher != "" {
				if _, err := regexp.Compile(matcher); err != nil {
					c.add(hfile, gf+".matcher", "not a valid regular expression: %v", err)
				}
			}
			list, ok := gm["hooks"].([]any)
			if !ok {
				c.add(hfile, gf+".hooks", "must be an array of hooks")
				continue
			}
			for hi, h := range list {
				hf := fmt.Sprintf("%s.hooks[%d]", gf, hi)
				hm, ok := h.(map[string]any)
				if !ok {
					c.add(hfile, hf, "must be an object")
					continue
				}
				if t := w.strAt(hm, hf, "type", true); t != "" && t != "command" {
					c.add(hfile, hf+".type", "%q: only \"command\" hooks are supported", t)
				}
				hk := Hook{Event: ev, Matcher: matcher, Command: w.strAt(hm, hf, "command", true), Timeout: DefaultHookTimeout}
				checkPlaceholders(c, hfile, hf+".command", hk.Command)
				checkEscape(c, hfile, hf+".command", hk.Command)
				if tv, ok := hm["timeout"]; ok {
					n, ok := tv.(json.Number)
					secs, err := n.Float64()
					if !ok || err != nil || secs < 1 || secs > 3600 {
						c.add(hfile, hf+".timeout", "must be a number of seconds from 1 to 3600")
					} else {
						hk.Timeout = time.Duration(secs * float64(time.Second))
					}
				}
				hooks = append(hooks, hk)
			}
		}
	}
	return hooks, hfile
}

// relInside cleans a manifest-relative path and reports whether it stays inside the
// plugin folder.
func relInside(p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", false
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", false
	}
	return clean, true
}

// checkPlaceholdersAndPaths refuses unknown ${…} placeholders and paths that leave
// the plugin folder, in every server string that later becomes part of a command
// line. Hooks are checked where they are read, which knows their field paths.
func checkPlaceholdersAndPaths(c *collector, m *Manifest, sbase string) {
	for _, s := range m.Servers {
		f := m.ServersFile
		base := sbase + s.Name
		checkPlaceholders(c, f, base+".command", s.Command)
		checkEscape(c, f, base+".command", s.Command)
		for i, a := range s.Args {
			checkPlaceholders(c, f, fmt.Sprintf("%s.args[%d]", base, i), a)
			checkEscape(c, f, fmt.Sprintf("%s.args[%d]", base, i), a)
		}
		for k, v := range s.Env {
			checkPlaceholders(c, f, base+".env."+k, v)
		}
		if s.Cwd != "" {
			checkPlaceholders(c, f, base+".cwd", s.Cwd)
			if !strings.HasPrefix(s.Cwd, "${") {
				if _, ok := relInside(s.Cwd); !ok {
					c.add(f, base+".cwd", "%q: must be a folder inside the plugin folder", s.Cwd)
				}
			} else {
				checkEscape(c, f, base+".cwd", s.Cwd)
			}
		}
	}
}

// checkPlaceholders refuses any ${…} other than the known placeholders.
func checkPlaceholders(c *collector, file, field, s string) {
	for _, sub := range placeRE.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(Placeholders, sub[1]) {
			c.add(file, field, "unknown placeholder ${%s} (known: ${%s})", sub[1], strings.Join(Placeholders, "}, ${"))
		}
	}
	if strings.Count(s, "${") != len(placeRE.FindAllString(s, -1)) {
		c.add(file, field, "unterminated placeholder")
	}
}

// checkEscape refuses a path that starts inside the plugin folder (or its data
// folder) and leaves it with "..".
func checkEscape(c *collector, file, field, s string) {
	for _, ph := range []string{"${PLUGIN_ROOT}", "${CLAUDE_PLUGIN_ROOT}", "${PLUGIN_DATA}", "${CLAUDE_PLUGIN_DATA}"} {
		if rest, ok := strings.CutPrefix(s, ph); ok {
			if _, ok := relInside(strings.TrimPrefix(rest, "/")); !ok && rest != "" && rest != "/" {
				c.add(file, field, "%q: leaves the plugin folder", s)
			}
			return
		}
	}
	if s == "" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "${") {
		return
	}
	// A relative path ("../x", "./../x", "sub/../../x") must stay inside.
	if clean := path.Clean(s); clean == ".." || strings.HasPrefix(clean, "../") {
		c.add(file, field, "%q: leaves the plugin folder", s)
	}
}

// walker reads typed fields and records field errors.
type walker struct {
	c    *collector
	file string
}

func (w walker) withFile(f string) walker { w.file = f; return w }

func (w walker) typeErr(field, want string) {
	w.c.add(w.file, field, "must be %s", want)
}

func (w walker) str(o map[string]any, key string, required bool) string {
	return w.strAt(o, "", key, required)
}

func join(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

func (w walker) strAt(o map[string]any, base, key string, required bool) string {
	v, ok := o[key]
	if !ok {
		if required {
			w.c.add(w.file, join(base, key), "is required")
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		w.typeErr(join(base, key), "a string")
		return ""
	}
	if strings.ContainsRune(s, 0) {
		w.c.add(w.file, join(base, key), "contains a NUL byte")
		return ""
	}
	if required && s == "" {
		w.c.add(w.file, join(base, key), "must not be empty")
	}
	return s
}

func (w walker) obj(o map[string]any, key string, required bool) (map[string]any, bool) {
	return w.objAt(o, "", key, required)
}

func (w walker) objAt(o map[string]any, base, key string, required bool) (map[string]any, bool) {
	v, ok := o[key]
	if !ok {
		if required {
			w.c.add(w.file, join(base, key), "is required")
		}
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		w.typeErr(join(base, key), "an object")
		return nil, false
	}
	return m, true
}

func (w walker) unknownKeys(o map[string]any, base string, known ...string) {
	for k := range o {
		if !slices.Contains(known, k) {
			w.c.add(w.file, join(base, k), "unknown key (known: %s)", strings.Join(known, ", "))
		}
	}
}

func (w walker) author(top map[string]any) string {
	v, ok := top["author"]
	if !ok {
		return ""
	}
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		name, _ := t["name"].(string)
		if email, ok := t["email"].(string); ok && email != "" {
			return name + " <" + email + ">"
		}
		return name
	}
	w.typeErr("author", "a string or an object with name and email")
	return ""
}

func (w walker) egress(v any, field string) []EgressEntry {
	list, ok := v.([]any)
	if !ok {
		w.typeErr(field, "an array of {host, ports, reason}")
		return nil
	}
	out := make([]EgressEntry, 0, len(list))
	for i, item := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		o, ok := item.(map[string]any)
		if !ok {
			w.typeErr(f, "an object {host, ports, reason}")
			continue
		}
		w.unknownKeys(o, f, "host", "ports", "reason")
		e := EgressEntry{Host: w.strAt(o, f, "host", true), Reason: w.strAt(o, f, "reason", false)}
		if e.Host != "" {
			p, err := netrule.ParsePattern(e.Host)
			if err != nil {
				w.c.add(w.file, f+".host", "%v", err)
			} else {
				if len(p.Ports) > 0 {
					w.c.add(w.file, f+".host", "%q: give ports in \"ports\", not in the host", e.Host)
				}
				e.Host = p.Host
			}
		}
		if pv, ok := o["ports"]; ok {
			ports, ok := pv.([]any)
			if !ok {
				w.typeErr(f+".ports", "an array of port numbers")
			}
			for j, pn := range ports {
				n, ok := pn.(json.Number)
				port, err := netrule.ParsePort(string(n))
				if !ok || err != nil {
					w.c.add(w.file, fmt.Sprintf("%s.ports[%d]", f, j), "must be a port number from 1 to 65535")
					continue
				}
				e.Ports = append(e.Ports, port)
			}
		}
		out = append(out, e)
	}
	return out
}

func (w walker) server(prefix, name string, v any) Server {
	base := prefix + name
	s := Server{Name: name}
	if !serverRE.MatchString(name) {
		w.c.add(w.file, base, "server name must be letters, digits, '.', '_' or '-' (at most 64)")
	}
	o, ok := v.(map[string]any)
	if !ok {
		w.typeErr(base, "an object")
		return s
	}
	if t, ok := o["type"]; ok && t != "stdio" {
		w.c.add(w.file, base+".type", "only stdio servers are supported")
	}
	if _, ok := o["url"]; ok {
		w.c.add(w.file, base+".url", "remote servers are not supported; give a stdio command")
	}
	s.Command = w.strAt(o, base, "command", true)
	if av, ok := o["args"]; ok {
		list, ok := av.([]any)
		if !ok {
			w.typeErr(base+".args", "an array of strings")
		}
		for i, a := range list {
			as, ok := a.(string)
			if !ok || strings.ContainsRune(as, 0) {
				w.typeErr(fmt.Sprintf("%s.args[%d]", base, i), "a string")
				continue
			}
			s.Args = append(s.Args, as)
		}
	}
	if ev, ok := w.objAt(o, base, "env", false); ok {
		s.Env = map[string]string{}
		for k, val := range ev {
			f := base + ".env." + k
			if !envKeyRE.MatchString(k) {
				w.c.add(w.file, f, "not a valid environment variable name")
				continue
			}
			vs, ok := val.(string)
			if !ok || strings.ContainsRune(vs, 0) {
				w.typeErr(f, "a string")
				continue
			}
			s.Env[k] = vs
		}
	}
	s.Cwd = w.strAt(o, base, "cwd", false)
	return s
}

func (w walker) serverExt(s *Server, name string, v any) {
	base := "extensions.\"ai.oz0\".servers." + name
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
		w.c.add(w.file, base+".sandbox", "%q: must be default, host or own", sb)
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
		w.unknownKeys(lv, base+".limits", "memory_mb", "pids", "cpu_percent", "open_files")
		num := func(key string, max int) int {
			v, ok := lv[key]
			if !ok {
				return 0
			}
			n, ok := v.(json.Number)
			i, err := n.Int64()
			if !ok || err != nil || i < 1 || i > int64(max) {
				w.c.add(w.file, base+".limits."+key, "must be a whole number from 1 to %d", max)
				return 0
			}
			return int(i)
		}
		s.Limits = Limits{
			MemoryMB:  num("memory_mb", 1<<20),
			Pids:      num("pids", 1<<16),
			CPUPct:    num("cpu_percent", 6400),
			OpenFiles: num("open_files", 1<<20),
		}
	}
}
