package backenddarwin

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// checked is a profile that passed the structural checks, ready for questions.
type checked struct {
	rules  []rule
	params map[string]string
	// links are the symlinks of the Mac the questions are asked about (path →
	// absolute target). Seatbelt judges the path the kernel resolved, so a
	// question about a path through a link is a question about its target.
	links map[string]string
}

// query is one thing a tool attempts.
type query struct {
	op   string
	path string // a file, or a unix socket's path
	sock string // "local" (bind, accept) or "remote" (connect) for a unix socket
	ip   string // remote "host:port" of an IP connection
	name string // a mach service or sysctl name
}

// checkProfile runs every structural check on a rendered profile for s (rendered
// without host facts), then asks it what it allows for the places that matter.
func checkProfile(p Profile, s *sandbox.Spec) (*checked, error) {
	return checkProfileWith(p, s, Options{})
}

// checkProfileWith is checkProfile for a profile rendered with o.
func checkProfileWith(p Profile, s *sandbox.Spec, o Options) (*checked, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if n := len(p.Text); n > MaxProfileBytes {
		bad("profile text is %d bytes", n)
	}
	forms, err := parseSBPL(p.Text)
	if err != nil {
		return nil, fmt.Errorf("profile does not parse: %w", err)
	}
	params := map[string]string{}
	for _, prm := range p.Params {
		if _, dup := params[prm.Name]; dup {
			bad("parameter %s given twice", prm.Name)
		}
		params[prm.Name] = prm.Value
		if prm.Value != "/" && strings.Contains(p.Text, prm.Value) {
			bad("parameter %s value %q is spliced into the profile text", prm.Name, prm.Value)
		}
		v := prm.Value
		if strings.HasPrefix(prm.Name, "LINK_") {
			// The links at / themselves, which path resolution stats.
			if !slices.Contains(RootLinks, v) {
				bad("parameter %s=%q is not one of the links at /", prm.Name, v)
			}
			continue
		}
		for _, pre := range []string{"/tmp", "/var", "/etc"} {
			if v == pre || strings.HasPrefix(v, pre+"/") {
				bad("parameter %s=%q is not canonical: macOS names it under /private", prm.Name, v)
			}
		}
		if v != "/" && (strings.HasSuffix(v, "/") || strings.Contains(v, "//")) {
			bad("parameter %s=%q has a trailing or doubled '/'", prm.Name, v)
		}
	}
	if len(forms) < 2 || forms[0].String() != "(version 1)" {
		return nil, errors.New("profile does not start with (version 1)")
	}
	tag := Tag + s.Plugin
	if got := forms[1].String(); got != `(deny default (with message "`+tag+`"))` {
		bad("second form is %s, want (deny default) with the tag", got)
	}
	used := map[string]bool{}
	var rules []rule
	for i, f := range forms[1:] {
		r, err := readRule(f, params, used)
		if err != nil {
			bad("form %s: %v", f, err)
			continue
		}
		r.index = i
		rules = append(rules, r)
	}
	for name := range params {
		if !used[name] {
			bad("parameter %s is never used", name)
		}
	}
	c := &checked{rules: rules, params: params}

	// Writable places: the home and writable mounts, canonical.
	var writable []string
	for _, m := range s.Mounts {
		if m.Writable {
			if w, err := Canonical(m.Source); err == nil {
				writable = append(writable, w)
			}
		}
	}
	if h, err := Canonical(s.Home); err == nil {
		writable = append(writable, h)
	}
	inWritable := func(f sexp) bool {
		// f is (subpath (param X)): X must name a writable place or lie in one.
		if f.head() != "subpath" {
			return false
		}
		v := params[f.list[1].list[1].str]
		for _, w := range writable {
			if within(v, w) {
				return true
			}
		}
		return false
	}
	services := slices.Collect(func(yield func(string) bool) {
		for n := range MachServices {
			if !yield(n) {
				return
			}
		}
	})
	if s.TrustD {
		services = append(services, TrustDService)
	}
	wantPort := ""
	if s.Network == policy.NetProxy && s.Proxy != nil && s.Proxy.Port != 0 {
		wantPort = `(remote ip "localhost:` + strconv.Itoa(s.Proxy.Port) + `")`
	}

	lastAllow, firstDeny := -1, len(rules)
	allowIP := 0
	for _, r := range rules {
		if r.action == "allow" {
			lastAllow = r.index
		} else if r.ops[0] != "default" && r.index < firstDeny {
			firstDeny = r.index
		}
		if r.action == "deny" && r.message != tag {
			bad("deny %v carries message %q, want %q", r.ops, r.message, tag)
		}
		if r.action != "allow" {
			continue
		}
		if len(r.filters) == 0 {
			for _, op := range r.ops {
				if !unfiltered[op] {
					bad("allow %s has no filter", op)
				}
			}
		}
		for _, op := range r.ops {
			for _, f := range r.filters {
				ok := false
				switch {
				case strings.HasPrefix(op, "file-") || op == "process-exec":
					ok = pathFilters[f.head()]
				case op == "network-outbound" && f.head() == "remote" && f.list[1].atom == "ip":
					ok = f.String() == wantPort
					allowIP++
				case op == "network-outbound":
					ok = f.head() == "remote" && f.list[1].atom == "unix-socket" && inWritable(f.list[2])
				case op == "network-bind" || op == "network-inbound":
					ok = f.head() == "local" && f.list[1].atom == "unix-socket" && inWritable(f.list[2])
				case op == "mach-lookup":
					ok = f.head() == "global-name" && slices.Contains(services, f.list[1].str)
				case op == "sysctl-read":
					ok = strings.HasPrefix(f.head(), "sysctl-name")
				case op == "signal" || op == "process-info*":
					ok = f.head() == "target"
				}
				if !ok {
					bad("allow %s has filter %s", op, f)
				}
			}
		}
	}
	if want := 0; wantPort != "" {
		want = 1
		if allowIP != want {
			bad("%d outbound IP allows, want exactly %s", allowIP, wantPort)
		}
	} else if allowIP != 0 {
		bad("%d outbound IP allows for a sandbox without a proxy", allowIP)
	}
	if lastAllow > firstDeny {
		bad("an allow (form %d) follows an explicit deny (form %d): denies must come last", lastAllow, firstDeny)
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.checkPlaces(s, o)
}

func readRule(f sexp, params map[string]string, used map[string]bool) (rule, error) {
	r := rule{action: f.head()}
	if r.action != "allow" && r.action != "deny" {
		return r, fmt.Errorf("unknown form %q", r.action)
	}
	for _, x := range f.list[1:] {
		switch {
		case !x.isList && !x.isStr:
			if !knownOps[x.atom] {
				return r, fmt.Errorf("unknown operation %q", x.atom)
			}
			if len(r.filters) > 0 {
				return r, fmt.Errorf("operation %q after a filter", x.atom)
			}
			r.ops = append(r.ops, x.atom)
		case x.head() == "with":
			if len(x.list) != 3 || x.list[1].atom != "message" || !x.list[2].isStr {
				return r, fmt.Errorf("unknown modifier %s", x)
			}
			r.message = x.list[2].str
		case x.isList:
			if err := checkFilter(x, params, used); err != nil {
				return r, err
			}
			r.filters = append(r.filters, x)
		default:
			return r, fmt.Errorf("stray string %s", x)
		}
	}
	if len(r.ops) == 0 {
		return r, errors.New("no operation")
	}
	return r, nil
}

func checkFilter(f sexp, params map[string]string, used map[string]bool) error {
	h := f.head()
	switch {
	case pathFilters[h]:
		// Paths come only as parameters: (subpath (param "NAME")).
		if len(f.list) != 2 || f.list[1].head() != "param" || len(f.list[1].list) != 2 || !f.list[1].list[1].isStr {
			return fmt.Errorf("path filter %s does not take a parameter", f)
		}
		name := f.list[1].list[1].str
		if _, ok := params[name]; !ok {
			return fmt.Errorf("path filter %s names an undefined parameter", f)
		}
		used[name] = true
	case logicFilters[h]:
		if len(f.list) < 2 || h == "require-not" && len(f.list) != 2 {
			return fmt.Errorf("malformed %s", f)
		}
		for _, x := range f.list[1:] {
			if err := checkFilter(x, params, used); err != nil {
				return err
			}
		}
	case nameFilters[h]:
		if len(f.list) != 2 || !f.list[1].isStr || f.list[1].str == "" {
			return fmt.Errorf("malformed %s", f)
		}
	case h == "target":
		if f.String() != "(target same-sandbox)" {
			return fmt.Errorf("unexpected %s", f)
		}
	case (h == "local" || h == "remote") && len(f.list) == 3 && f.list[1].atom == "unix-socket":
		// A unix socket's path, given as (subpath (param …)).
		if f.list[2].head() != "subpath" {
			return fmt.Errorf("unix socket filter %s is not (… unix-socket (subpath (param …)))", f)
		}
		return checkFilter(f.list[2], params, used)
	case h == "remote":
		if len(f.list) != 3 || f.list[1].atom != "ip" || !f.list[2].isStr || !strings.HasPrefix(f.list[2].str, "localhost:") {
			return fmt.Errorf("network filter %s is not (remote ip \"localhost:PORT\")", f)
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(f.list[2].str, "localhost:")); err != nil {
			return fmt.Errorf("network filter %s has no port number", f)
		}
	default:
		return fmt.Errorf("unknown filter %s", f)
	}
	return nil
}

// resolve follows the modelled links in p the way the kernel does before Seatbelt
// sees the path; the last component is kept as written when lastToo is false
// (lstat, unlink, rename, creating an entry).
func (c *checked) resolve(p string, lastToo bool) string {
	for range 40 {
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		changed := false
		for i := range parts {
			if i == len(parts)-1 && !lastToo {
				break
			}
			pre := "/" + strings.Join(parts[:i+1], "/")
			if t, ok := c.links[pre]; ok {
				p = path.Join(t, strings.Join(parts[i+1:], "/"))
				changed = true
				break
			}
		}
		if !changed {
			return p
		}
	}
	return p
}

// matches evaluates a filter for a query.
func (c *checked) matches(f sexp, q query) bool {
	switch f.head() {
	case "subpath":
		return q.path != "" && within(q.path, c.params[f.list[1].list[1].str])
	case "literal":
		return q.path != "" && q.path == c.params[f.list[1].list[1].str]
	case "local", "remote":
		if f.list[1].atom == "ip" {
			return q.ip != "" && f.head() == "remote" && q.ip == f.list[2].str
		}
		return q.sock == f.head() && c.matches(f.list[2], q)
	case "global-name":
		return q.op == "mach-lookup" && q.name == f.list[1].str
	case "sysctl-name":
		return q.op == "sysctl-read" && q.name == f.list[1].str
	case "sysctl-name-prefix":
		return q.op == "sysctl-read" && strings.HasPrefix(q.name, f.list[1].str)
	case "require-all":
		for _, x := range f.list[1:] {
			if !c.matches(x, q) {
				return false
			}
		}
		return true
	case "require-any":
		for _, x := range f.list[1:] {
			if c.matches(x, q) {
				return true
			}
		}
		return false
	case "require-not":
		return !c.matches(f.list[1], q)
	}
	return false
}

// entryOps act on a path's own entry: its last component is not followed.
var entryOps = map[string]bool{"file-read-metadata": true, "file-write-unlink": true, "file-write-create": true}

// ask answers allow or deny for any query, the last matching rule winning
// (Seatbelt's order for rules with path filters).
func (c *checked) ask(q query) string {
	if q.path != "" {
		q.path = c.resolve(q.path, !entryOps[q.op])
	}
	return c.decideFrom(q, "deny", true)
}

// explicit is ask without (deny default): "none" when no rule names the path.
// Denied places must be denied by a rule of their own, not merely left out.
func (c *checked) explicit(op, p string) string {
	return c.decideFrom(query{op: op, path: c.resolve(p, !entryOps[op])}, "none", false)
}

func (c *checked) decideFrom(q query, out string, useDefault bool) string {
	for _, r := range c.rules {
		hit := false
		for _, o := range r.ops {
			hit = hit || opMatches(o, q.op)
		}
		if !hit {
			continue
		}
		if r.ops[0] == "default" {
			if useDefault {
				out = r.action
			}
			continue
		}
		if len(r.filters) == 0 {
			out = r.action
			continue
		}
		for _, f := range r.filters {
			if c.matches(f, q) {
				out = r.action
				break
			}
		}
	}
	return out
}

var fileOps = []string{"file-read-data", "file-read-metadata", "file-read-xattr", "file-write-data", "file-write-create", "file-write-unlink", "process-exec", "file-map-executable"}

// entryWrites change a folder's own entry: remove or rename it, put something in
// its place, change its mode.
var entryWrites = []string{"file-write-unlink", "file-write-create", "file-write-mode", "file-write-owner"}

// execOps run code from a file: only read-only places and the plugin's view may.
var execOps = map[string]bool{"process-exec": true, "file-map-executable": true}

// checkPlaces asks the profile about the places the issue names: the data folder,
// the key and other plugins are denied for every operation (the data folder's
// parents of this plugin's folders may only be stat'ed); the plugin folder is read
// only; beneath the home is writable but not the home's own entry or any folder
// on the way to it; /private/tmp is out of reach; what real runtimes need is there
// and nothing a plugin could abuse is.
func (c *checked) checkPlaces(s *sandbox.Spec, o Options) error {
	var errs []error
	expectQ := func(q query, want string) {
		if got := c.ask(q); got != want {
			errs = append(errs, fmt.Errorf("%+v: %s, want %s", q, got, want))
		}
	}
	expect := func(op, p, want string) { expectQ(query{op: op, path: p}, want) }
	expectDenied := func(op, p string) {
		expect(op, p, "deny")
		if got := c.explicit(op, p); got != "deny" {
			errs = append(errs, fmt.Errorf("%s %q: denied only by default, want an explicit deny", op, p))
		}
	}
	canon := func(p string) string {
		v, err := Canonical(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("canonical %q: %w", p, err))
		}
		return v
	}
	data, pdir, home := canon(s.DataDir), canon(s.PluginDir), canon(s.Home)
	var mounts []string
	for _, m := range s.Mounts {
		mounts = append(mounts, canon(m.Source))
	}
	mounts = append(mounts, pdir, home)
	inMount := func(p string) bool {
		for _, m := range mounts {
			if within(p, m) {
				return true
			}
		}
		return false
	}
	aboveMount := func(p string) bool {
		for _, m := range mounts {
			if within(m, p) && m != p {
				return true
			}
		}
		return false
	}
	for _, d := range append([]string{s.DataDir}, s.Deny...) {
		d = canon(d)
		for _, probe := range []string{d, d + "/zz-probe"} {
			if inMount(probe) {
				continue
			}
			for _, op := range fileOps {
				if op == "file-read-metadata" && aboveMount(probe) {
					expect(op, probe, "allow")
				} else {
					expectDenied(op, probe)
				}
			}
		}
	}
	pdirWritable := false
	for _, m := range s.Mounts {
		pdirWritable = pdirWritable || m.Writable && canon(m.Source) == pdir
	}
	for _, op := range fileOps {
		// The plugin folder is read and run from; written only where it is the
		// plugin's own view (node/view), never the installed commit.
		want := "deny"
		if strings.HasPrefix(op, "file-read") || execOps[op] || pdirWritable {
			want = "allow"
		}
		expect(op, pdir+"/server.py", want)
		expect(op, pdir+"/.venv/bin/entry", want)
		want = "allow"
		if execOps[op] {
			want = "deny"
		}
		expect(op, home+"/tmp/f", want)
		if !inMount("/private/tmp/zz-probe") {
			expect(op, "/private/tmp/zz-probe", "deny")
		}
	}

	// The home's own entry, and every folder on the way to it, cannot be removed,
	// renamed, replaced or re-moded: a link in its place would be followed by the
	// next render. Inside the data folder the deny is explicit.
	for _, op := range entryWrites {
		expectDenied(op, home)
		for a := path.Dir(home); a != "/"; a = path.Dir(a) {
			if within(a, data) {
				expectDenied(op, a)
			} else {
				expect(op, a, "deny")
			}
		}
	}
	// A link the plugin makes inside its home leads nowhere it could not go anyway.
	saved := c.links
	c.links = map[string]string{home + "/ssh": path.Dir(data) + "/.ssh", home + "/other": data + "/homes/other-plugin", home + "/key": data + "/node.key"}
	for l := range c.links {
		expect("file-write-create", l, "allow") // making the link itself
		for _, op := range []string{"file-read-data", "file-write-data", "file-write-create"} {
			expect(op, l+"/x", "deny")
		}
	}
	expect("file-read-data", home+"/key", "deny")
	// Nor can it reach the node's sockets through a link beneath its home.
	c.links = map[string]string{home + "/ctl.sock": data + "/run/control.sock"}
	expectQ(query{op: "network-outbound", sock: "remote", path: home + "/ctl.sock"}, "deny")
	c.links = saved

	// Every allowed place can be reached by a runtime resolving its path one
	// component at a time; the links at / into /private can be read; the folders
	// above allowed places are stat'ed, never listed.
	for _, r := range c.rules {
		if r.action != "allow" || !slices.ContainsFunc(r.ops, func(op string) bool { return opMatches(op, "file-read-data") }) {
			continue
		}
		for _, f := range r.filters {
			if !pathFilters[f.head()] {
				continue
			}
			for a := c.params[f.list[1].list[1].str]; a != "/"; {
				a = path.Dir(a)
				expect("file-read-metadata", a, "allow")
			}
		}
	}
	for _, l := range RootLinks {
		expect("file-read-metadata", l, "allow")
	}
	for _, p := range []string{"/Users", "/opt/homebrew", "/usr/local", "/private/var"} {
		expect("file-read-data", p, "deny")
	}

	// Homebrew: what runtimes load from, not its databases or configuration.
	for _, pre := range PackagePrefixes {
		expect("process-exec", pre+"/bin/node", "allow")
		expect("file-map-executable", pre+"/Cellar/python@3.12/3.12.4/lib/libpython3.12.dylib", "allow")
		expect("file-read-data", pre+"/lib/node_modules/npm/package.json", "allow")
		expect("file-read-data", pre+"/etc/openssl@3/cert.pem", "allow")
		expect("file-read-data", pre+"/share/ca-certificates/cacert.pem", "allow")
		for _, secret := range []string{"/var/postgresql@16/pg_hba.conf", "/var/mysql/ibdata1", "/etc/my.cnf", "/etc/npmrc", "/etc/redis.conf"} {
			expect("file-read-data", pre+secret, "deny")
		}
	}
	// The developer folder is the one xcode-select names, not a guessed Xcode.
	for _, d := range []string{"/Applications/Xcode.app/Contents/Developer", "/Library/Developer/CommandLineTools"} {
		want := "deny"
		if o.DeveloperDir == d {
			want = "allow"
		}
		expect("process-exec", d+"/usr/bin/python3", want)
	}

	// Devices: standard streams and /dev/fd for shells; the terminal only for exec.
	for _, p := range []string{"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/63"} {
		expect("file-write-data", p, "allow")
	}
	expect("file-read-data", "/dev/fd/0", "allow")
	tty := "deny"
	if s.Kind == "exec" && o.Terminal != "" {
		tty = "allow"
		expect("file-ioctl", o.Terminal, "allow")
	}
	for _, p := range []string{"/dev/tty", o.Terminal} {
		if p != "" {
			expect("file-write-data", p, tty)
		}
	}
	expect("file-write-data", "/dev/ttys999", "deny")
	expect("file-ioctl", "/dev/tty", tty)

	// Unix sockets: bound and connected beneath the home only; never the node's.
	expectQ(query{op: "network-bind", sock: "local", path: home + "/tmp/mp-1.sock"}, "allow")
	expectQ(query{op: "network-inbound", sock: "local", path: home + "/tmp/mp-1.sock"}, "allow")
	expectQ(query{op: "network-outbound", sock: "remote", path: home + "/tmp/mp-1.sock"}, "allow")
	for _, p := range []string{data + "/run/control.sock", data + "/run/mcp.sock", data + "/run/egress/other-plugin/egress.sock", "/private/var/run/mDNSResponder", "/private/tmp/x.sock", data + "/homes/other-plugin/s.sock"} {
		expectQ(query{op: "network-outbound", sock: "remote", path: p}, "deny")
		expectQ(query{op: "network-bind", sock: "local", path: p}, "deny")
	}

	// Network: the proxy port on loopback when there is one, nothing else.
	for _, ip := range []string{"localhost:22", "*:443", "localhost:5432"} {
		expectQ(query{op: "network-outbound", ip: ip}, "deny")
	}
	if s.Network == policy.NetProxy && s.Proxy != nil && s.Proxy.Port != 0 {
		expectQ(query{op: "network-outbound", ip: "localhost:" + strconv.Itoa(s.Proxy.Port)}, "allow")
	}

	// Mach: os.cpus() and semaphores work; trustd only when granted; no logger
	// (forged denial lines) and no notification center (a channel between plugins).
	expectQ(query{op: "mach-host-processor-info"}, "allow")
	expectQ(query{op: "ipc-posix-sem"}, "allow")
	trustd := "deny"
	if s.TrustD {
		trustd = "allow"
	}
	expectQ(query{op: "mach-lookup", name: TrustDService}, trustd)
	expectQ(query{op: "mach-lookup", name: "com.apple.system.opendirectoryd.libinfo"}, "allow")
	for _, n := range []string{"com.apple.logd", "com.apple.system.logger", "com.apple.system.notification_center", "com.apple.pasteboard.1", "com.apple.SecurityServer"} {
		expectQ(query{op: "mach-lookup", name: n}, "deny")
	}
	for _, n := range []string{"hw.ncpu", "hw.model", "machdep.cpu.brand_string", "hw.optional.arm64"} {
		expectQ(query{op: "sysctl-read", name: n}, "allow")
	}

	// No allow reaches a denied place other than stat'ing a parent of an allowed one.
	for _, r := range c.rules {
		if r.action != "allow" {
			continue
		}
		for _, f := range r.filters {
			if !pathFilters[f.head()] {
				continue
			}
			v := c.params[f.list[1].list[1].str]
			for _, d := range append([]string{data}, s.Deny...) {
				d = canon(d)
				switch {
				case within(v, d) && inMount(v):
				case f.head() == "literal" && len(r.ops) == 1 && r.ops[0] == "file-read-metadata" && aboveMount(v):
				case within(v, d) || within(d, v) && f.head() == "subpath":
					errs = append(errs, fmt.Errorf("allow %v %s reaches the denied %q", r.ops, f, d))
				}
			}
		}
	}
	return errors.Join(errs...)
}
