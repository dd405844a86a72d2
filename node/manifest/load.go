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
	"slices"
	"strings"
	"syscall"

	"oz0.ai/node/internal/lazyre"
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
	nameRE      = lazyre.New(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	namespaceRE = lazyre.New(`^[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+(-[a-z0-9]+)*)+$`)
	serverRE    = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`) // and at most 64 bytes (ServerID)
	envKeyRE    = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
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
	l := &loader{c: &collector{}, m: &Manifest{}, fsys: fsys, opts: opts}
	top, ok := l.manifestFile()
	if !ok {
		return nil, l.c.err()
	}
	m, c, file := l.m, l.c, l.m.File
	w := walker{c: c, file: file}
	m.Name = w.str(top, "name", true)
	m.DisplayName = w.str(top, "displayName", false)
	if lower := strings.ToLower(m.Name); lower != m.Name && nameRE.MatchString(lower) {
		// Claude Code installs a name with capitals ("Notion"); the node's names are
		// in lower case (a user, a folder, a tool prefix). The name as written stays
		// its display name.
		l.notice(file, "name", "%q is read as %q: plugin names on the node are lower-case", m.Name, lower)
		if m.DisplayName == "" {
			m.DisplayName = m.Name
		}
		m.Name = lower
	}
	m.Version = w.str(top, "version", false)
	m.Description = w.str(top, "description", false)
	m.Author = w.author(top)
	checkName(c, file, m.Name)
	l.userConfig(top)

	var ext map[string]any
	if exts, ok := w.obj(top, "extensions", false); ok {
		ext, _ = w.objAt(exts, "extensions", ReservedNamespace, false)
	}
	var serverExt map[string]any
	if ext != nil {
		base := "extensions.\"ai.oz0\""
		w.unknownKeys(ext, base, "namespace", "egress", "servers", "isolation", "secrets")
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
		if v, ok := ext["secrets"]; ok {
			m.Secrets = w.secrets(v, base+".secrets")
		}
	}

	l.notRun(top)
	l.loadServers(top, serverExt)
	l.loadHooks(top)
	if err := c.err(); err != nil {
		return nil, err
	}
	return m, nil
}

// loader carries one Load: the findings so far and the manifest being built.
type loader struct {
	c    *collector
	m    *Manifest
	fsys fs.FS
	opts Options
}

// manifestFile reads the manifest: .claude-plugin/plugin.json (Claude Code) or
// plugin.json (Agent Plugins 1.0). With both, Claude Code's wins, as in Claude Code.
func (l *loader) manifestFile() (map[string]any, bool) {
	const claude, plain = ".claude-plugin/plugin.json", "plugin.json"
	cb, cErr := readFile(l.fsys, claude)
	pb, pErr := readFile(l.fsys, plain)
	switch {
	case !isNotExist(cErr):
		if cErr != nil {
			l.c.add(claude, "", "%v", cErr)
			return nil, false
		}
		l.m.File, l.m.Layout = claude, "claude-code"
		if !isNotExist(pErr) {
			l.notice(plain, "", "both %s and %s exist: Claude Code reads %s, and so does the node; %s is ignored", plain, claude, claude, plain)
		}
		return decodeObject(l.c, claude, cb)
	case !isNotExist(pErr):
		if pErr != nil {
			l.c.add(plain, "", "%v", pErr)
			return nil, false
		}
		l.m.File, l.m.Layout = plain, "agent-plugins"
		return decodeObject(l.c, plain, pb)
	}
	l.c.add(plain, "", "no plugin.json or .claude-plugin/plugin.json in the plugin folder")
	return nil, false
}

func isNotExist(err error) bool { return err != nil && errors.Is(err, fs.ErrNotExist) }

// checkString checks the ${…} references of a string that becomes part of a
// command line, and that it does not leave the plugin folder with "..".
func (l *loader) checkString(file, field, s string, isPath bool) {
	l.refsIn(file, field, s)
	if isPath {
		checkEscape(l.c, file, field, s)
	}
}

func orNone(s string) string {
	if s == "" {
		return "the plugin (it has no mcp.json)"
	}
	return s
}

// MaxNameLen is the longest plugin name.
const MaxNameLen = 64

// ValidName reports whether s is a plugin name: kebab-case (lower-case letters,
// digits, single hyphens) of at most MaxNameLen bytes. Every place that takes a
// plugin name from outside (a flag, a folder, a record) checks it with this.
func ValidName(s string) bool {
	return len(s) <= MaxNameLen && nameRE.MatchString(s)
}

func checkName(c *collector, file, name string) {
	switch {
	case name == "":
	case len(name) > MaxNameLen:
		c.add(file, "name", "longer than %d characters", MaxNameLen)
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

// strings reads an array of strings (args).
func (w walker) strings(v any, field string) []string {
	list, ok := v.([]any)
	if !ok {
		w.typeErr(field, "an array of strings")
		return nil
	}
	out := []string{}
	for i, a := range list {
		as, ok := a.(string)
		if !ok || strings.ContainsRune(as, 0) {
			w.typeErr(fmt.Sprintf("%s[%d]", field, i), "a string")
			continue
		}
		out = append(out, as)
	}
	return out
}

func (w walker) limits(lv map[string]any, base string) Limits {
	w.unknownKeys(lv, base, "memory_mb", "pids", "cpu_percent", "open_files")
	num := func(key string, max int) int {
		v, ok := lv[key]
		if !ok {
			return 0
		}
		n, ok := v.(json.Number)
		i, err := n.Int64()
		if !ok || err != nil || i < 1 || i > int64(max) {
			w.c.add(w.file, base+"."+key, "must be a whole number from 1 to %d", max)
			return 0
		}
		return int(i)
	}
	return Limits{
		MemoryMB:  num("memory_mb", 1<<20),
		Pids:      num("pids", 1<<16),
		CPUPct:    num("cpu_percent", 6400),
		OpenFiles: num("open_files", 1<<20),
	}
}
