package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// An MCPB bundle (.mcpb, formerly .dxt) is a zip holding a local MCP server and a
// manifest.json saying how to start it (server.type node, python or binary;
// server.entry_point; server.mcp_config with ${__dirname} for the bundle's
// folder). A plugin names one in mcpServers, by URL or by a path in the plugin.
// Install fetches it (pinned by SHA-256) and unpacks it under BundleDir/<id>;
// from then on the manifest reader finds its manifest.json there and reads its
// server as a stdio server of the plugin (docs/plugin-format.md "MCPB bundles").
// Before install (lint) only the reference is known.

// BundleDir is where install unpacks a plugin's MCPB bundles, one folder each,
// inside the node's own build folder of the plugin tree.
const BundleDir = ".oz0/mcpb"

// Bundle is an MCPB bundle a manifest names.
type Bundle struct {
	// Field is where it is named (mcpServers, mcpServers[1]).
	Field string `json:"field"`
	// Source is the bundle's URL (http or https) or its path in the plugin, as
	// written, less a #sha256= pin.
	Source string `json:"source"`
	// Pin is the SHA-256 (hex) the URL's fragment #sha256=… asks for, or "".
	Pin string `json:"pin,omitempty"`
	// ID names its folder under BundleDir (BundleID of Source).
	ID string `json:"id"`
	// Server is the server it gives, once unpacked ("" before install).
	Server string `json:"server,omitempty"`
	// Type is its manifest's server.type, once unpacked.
	Type string `json:"type,omitempty"`
}

// IsURL reports whether the bundle is fetched (not a file of the plugin).
func (b Bundle) IsURL() bool { return strings.Contains(b.Source, "://") }

// Dir is the bundle's folder in the plugin tree.
func (b Bundle) Dir() string { return BundleDir + "/" + b.ID }

// BundleID is the folder name of a bundle source: short, fixed by the source.
func BundleID(source string) string {
	s := sha256.Sum256([]byte(source))
	return hex.EncodeToString(s[:8])
}

// isBundleRef reports whether an mcpServers string names an MCPB bundle.
func isBundleRef(p string) bool {
	lower := strings.ToLower(p)
	if i := strings.IndexAny(lower, "?#"); i >= 0 && strings.Contains(lower, "://") {
		lower = lower[:i]
	}
	return strings.HasSuffix(lower, ".mcpb") || strings.HasSuffix(lower, ".dxt")
}

var sha256HexRE = lazyre.New(`^[0-9a-f]{64}$`)

// parseBundleRef splits an mcpServers bundle reference into its source and pin.
func parseBundleRef(p string) (source, pin string, err error) {
	if !strings.Contains(p, "://") {
		rel, ok := relInside(p)
		if !ok {
			return "", "", fmt.Errorf("%q: a bundle path must lie inside the plugin folder", p)
		}
		return rel, "", nil
	}
	u, err := url.Parse(p)
	if err != nil {
		return "", "", fmt.Errorf("%q: not a URL: %w", p, err)
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return "", "", fmt.Errorf("%q: a bundle is fetched over http or https", p)
	case u.Hostname() == "":
		return "", "", fmt.Errorf("%q: no host", p)
	case u.User != nil:
		return "", "", fmt.Errorf("%s: credentials in the URL would show wherever the URL does", u.Redacted())
	}
	if u.Fragment != "" {
		h, ok := strings.CutPrefix(u.Fragment, "sha256=")
		if !ok || !sha256HexRE.MatchString(h) {
			return "", "", fmt.Errorf("%q: the only fragment a bundle URL takes is #sha256=<64 hex digits>", p)
		}
		pin = h
		u.Fragment, u.RawFragment = "", ""
	}
	return u.String(), pin, nil
}

// BundleManifest is what the node reads of a bundle's manifest.json.
type BundleManifest struct {
	Name        string
	Version     string
	DisplayName string
	// Type is server.type: node, python or binary.
	Type       string
	EntryPoint string
	// Command, Args and Env are server.mcp_config (for this OS, its
	// platform_overrides applied), or made from Type and EntryPoint.
	Command string
	Args    []string
	Env     map[string]string
	// Platforms are compatibility.platforms (Node.js names: linux, darwin,
	// win32); empty for all.
	Platforms []string
	// UserConfig is user_config as written (the userConfig schema).
	UserConfig map[string]any
}

// BundleTypes are the server types the node runs. "uv" (the host installs the
// bundle's dependencies at start) is not among them.
var BundleTypes = []string{"node", "python", "binary"}

// ParseBundleManifest reads a bundle's manifest.json for goos (linux, darwin).
func ParseBundleManifest(raw []byte, goos string) (*BundleManifest, error) {
	var doc struct {
		ManifestVersion string `json:"manifest_version"`
		DXTVersion      string `json:"dxt_version"`
		Name            string `json:"name"`
		DisplayName     string `json:"display_name"`
		Version         string `json:"version"`
		Server          *struct {
			Type       string `json:"type"`
			EntryPoint string `json:"entry_point"`
			MCPConfig  *struct {
				Command   string                     `json:"command"`
				Args      []string                   `json:"args"`
				Env       map[string]string          `json:"env"`
				Overrides map[string]json.RawMessage `json:"platform_overrides"`
			} `json:"mcp_config"`
		} `json:"server"`
		Compatibility struct {
			Platforms []string `json:"platforms"`
		} `json:"compatibility"`
		UserConfig map[string]any `json:"user_config"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	bm := &BundleManifest{Name: doc.Name, DisplayName: doc.DisplayName, Version: doc.Version,
		Platforms: doc.Compatibility.Platforms, UserConfig: doc.UserConfig}
	switch {
	case doc.ManifestVersion == "" && doc.DXTVersion == "":
		return nil, fmt.Errorf("manifest.json: no manifest_version: not an MCPB bundle manifest")
	case doc.Name == "" || ServerID(doc.Name) == "":
		return nil, fmt.Errorf("manifest.json: name: must name the bundle (letters or digits)")
	case doc.Server == nil:
		return nil, fmt.Errorf("manifest.json: no server")
	}
	bm.Type, bm.EntryPoint = doc.Server.Type, doc.Server.EntryPoint
	switch {
	case bm.Type == "uv":
		return nil, fmt.Errorf("manifest.json: server.type \"uv\": the host would install the bundle's Python dependencies when it starts, which a sandboxed server without network cannot; the node runs node, python and binary bundles")
	case !slices.Contains(BundleTypes, bm.Type):
		return nil, fmt.Errorf("manifest.json: server.type %q: must be node, python or binary", bm.Type)
	}
	if rel, ok := relInside(bm.EntryPoint); !ok || rel == "." {
		return nil, fmt.Errorf("manifest.json: server.entry_point %q: must be a file inside the bundle", bm.EntryPoint)
	} else {
		bm.EntryPoint = rel
	}
	if mc := doc.Server.MCPConfig; mc != nil && mc.Command != "" {
		bm.Command, bm.Args, bm.Env = mc.Command, mc.Args, mc.Env
		if o, ok := mc.Overrides[nodePlatform(goos)]; ok {
			var ov struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			}
			if err := json.Unmarshal(o, &ov); err != nil {
				return nil, fmt.Errorf("manifest.json: server.mcp_config.platform_overrides.%s: %w", nodePlatform(goos), err)
			}
			if ov.Command != "" {
				bm.Command = ov.Command
			}
			if ov.Args != nil {
				bm.Args = ov.Args
			}
			for k, v := range ov.Env {
				if bm.Env == nil {
					bm.Env = map[string]string{}
				}
				bm.Env[k] = v
			}
		}
	} else {
		// No mcp_config: how MCPB hosts start each type.
		entry := "${__dirname}/" + bm.EntryPoint
		switch bm.Type {
		case "node":
			bm.Command, bm.Args = "node", []string{entry}
		case "python":
			bm.Command, bm.Args = "python3", []string{entry}
		default:
			bm.Command = entry
		}
	}
	return bm, nil
}

// nodePlatform is goos as Node.js names it (compatibility.platforms).
func nodePlatform(goos string) string {
	if goos == "windows" {
		return "win32"
	}
	return goos
}

// SupportsThisOS reports whether the bundle declares this OS among its platforms
// (or declares none).
func (bm *BundleManifest) SupportsThisOS() bool {
	return len(bm.Platforms) == 0 || slices.Contains(bm.Platforms, nodePlatform(runtime.GOOS))
}

// serverEntry is the bundle's server as an mcpServers entry of the plugin,
// started in the bundle's folder dir (relative to the plugin root):
// ${__dirname} is that folder, ${/} and ${pathSeparator} are "/", a relative
// command with a slash is a file of the bundle, and "python" is the node's
// python3.
func (bm *BundleManifest) serverEntry(dir string) map[string]any {
	root := "${CLAUDE_PLUGIN_ROOT}/" + dir
	subst := func(s string) string {
		s = strings.ReplaceAll(s, "${__dirname}", root)
		s = strings.ReplaceAll(s, "${pathSeparator}", "/")
		return strings.ReplaceAll(s, "${/}", "/")
	}
	cmd := subst(bm.Command)
	switch {
	case cmd == "python":
		cmd = "python3"
	case strings.Contains(cmd, "/") && !strings.HasPrefix(cmd, "/") && !strings.HasPrefix(cmd, "${"):
		cmd = root + "/" + strings.TrimPrefix(cmd, "./")
	}
	args := make([]any, len(bm.Args))
	for i, a := range bm.Args {
		args[i] = subst(a)
	}
	e := map[string]any{"command": cmd, "args": args, "cwd": root}
	if len(bm.Env) > 0 {
		env := map[string]any{}
		for k, v := range bm.Env {
			env[k] = subst(v)
		}
		e["env"] = env
	}
	return e
}

// bundleRef reads an mcpServers string naming a bundle: the reference, and once
// install has unpacked it, its server.
func (l *loader) bundleRef(field, p string) (serverSource, bool) {
	source, pin, err := parseBundleRef(p)
	if err != nil {
		l.c.add(l.m.File, field, "MCPB bundle %v", err)
		return serverSource{}, false
	}
	b := Bundle{Field: field, Source: source, Pin: pin, ID: BundleID(source)}
	mf := b.Dir() + "/manifest.json"
	raw, err := readFile(l.fsys, mf)
	if isNotExist(err) {
		l.m.Bundles = append(l.m.Bundles, b)
		l.notice(l.m.File, field, "%s is an MCPB bundle: the node fetches it at install (pinned by SHA-256), unpacks it under the plugin's rules and runs its server sandboxed like any stdio server", source)
		return serverSource{}, false
	}
	if err != nil {
		l.c.add(mf, "", "%v", err)
		return serverSource{}, false
	}
	bm, err := ParseBundleManifest(raw, runtime.GOOS)
	if err != nil {
		l.c.add(mf, "", "%v", err)
		return serverSource{}, false
	}
	if bm.UserConfig != nil {
		l.userConfigFrom(mf, "user_config", bm.UserConfig)
	}
	b.Server, b.Type = ServerID(bm.Name), bm.Type
	l.m.Bundles = append(l.m.Bundles, b)
	return serverSource{file: mf, base: "server.mcp_config.", servers: map[string]any{bm.Name: bm.serverEntry(b.Dir())}}, true
}
