// Package egressrule holds what the egress proxy enforces for a plugin, as plans
// hand it over: its lists and its secrets, the sentinels its tools hold in place
// of those, and where systems keep their trusted roots. It decides nothing and
// does no I/O, so what plans a start never links the proxy itself.
package egressrule

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"oz0.ai/node/node/manifest"
)

// PluginRules are one plugin's manifest egress entries.
type PluginRules struct {
	Plugin string
	// Egress is the plugin-level list (extensions."ai.oz0".egress).
	Egress []manifest.EgressEntry
	// Servers holds server-level lists by server name. A server's list narrows the
	// plugin's: a host must be in both. A server missing from the map (or mapped to
	// nil) uses the plugin's list alone. It applies on endpoints opened for that
	// server (Listen.Server); a plugin-wide endpoint cannot tell servers apart.
	Servers map[string][]manifest.EgressEntry
	// Secrets are the values its endpoints put in for their sentinels
	// (secrets.go); the proxy holds them, no sandbox does.
	Secrets []Secret
}

// SentinelPrefix starts every sentinel: what the tool sees in place of a secret.
const SentinelPrefix = "oz0-secret-"

// Sentinel is the string a tool sees in place of the secret key of a plugin's
// server ("" the plugin's own, which its hooks use): unique to the three, stable
// across restarts and value changes (a new value applies at the proxy at once,
// no restart), and made of characters that pass unchanged through headers, URLs
// and the shell. It is not itself a secret: it is worth nothing away from the
// proxy of the endpoint it belongs to.
func Sentinel(plugin, server, key string) string {
	sum := sha256.Sum256([]byte("oz0-node secret sentinel\x00" + plugin + "\x00" + server + "\x00" + key))
	return SentinelPrefix + strings.ToLower(base32.StdEncoding.EncodeToString(sum[:15]))
}

// Secret is one value the proxy puts in for its sentinel.
type Secret struct {
	// Key is the operator's key (a userConfig key or a ${VAR} name): named in
	// audit lines, status and findings, never the value.
	Key string
	// Server is whose endpoint puts it in: a server's, or "" the plugin's own
	// (its hooks'). On any other endpoint its sentinel is refused.
	Server   string
	Sentinel string
	Value    string
	// Hosts, when set, narrows where it is put in (host patterns, as in egress
	// lists): the manifest's extensions."ai.oz0".secrets.KEY.hosts. Without them
	// it is bound to every host its endpoint may reach (the server's egress).
	Hosts []string
	// Body puts it in request bodies too (the manifest's body: true).
	Body bool
}

// SystemRootFiles are where Linux and macOS keep the system's root bundle, in the
// order Go's crypto/x509 reads them.
var SystemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
}
