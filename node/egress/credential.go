package egress

import (
	"bufio"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Host-loopback endpoints (auto mode, Seatbelt, an unsandboxed exec) can be reached
// by every local user and process, so the place a connection arrives at no longer
// says who speaks. Such an endpoint requires the plugin's (server's) credential:
// the password of the proxy URL its tool is given (http://oz0:SECRET@127.0.0.1:PORT),
// sent as Proxy-Authorization: Basic on HTTP and CONNECT requests and as SOCKS5
// username/password authentication (RFC 1929). Endpoints a sandbox reaches alone
// (its unix socket, a listener in its network namespace) need none.

// minCredential bounds how short a credential may be: a guessable one would let
// any local process speak as the plugin.
const minCredential = 32

// Credential derives the secret of one plugin's (server "" for the plugin-wide
// endpoint) host-loopback endpoint from key (the node's private key). The node
// and `oz0-node exec` beside it derive the same value without passing it around;
// nothing without the key can.
func Credential(key []byte, plugin, server string) (string, error) {
	if len(key) < 32 {
		return "", errors.New("egress credential: key shorter than 32 bytes")
	}
	b, err := hkdf.Key(sha256.New, key, nil, "oz0-node egress endpoint credential\x00"+plugin+"\x00"+server, 32)
	if err != nil {
		return "", fmt.Errorf("egress credential for %s/%s: %w", plugin, server, err)
	}
	return hex.EncodeToString(b), nil
}

// credential is what an endpoint checks a presented password against: its hash,
// so that the comparison takes the same time whatever was presented.
type credential struct{ sum [sha256.Size]byte }

func newCredential(secret string) (*credential, error) {
	if len(secret) < minCredential {
		return nil, fmt.Errorf("egress credential: %d bytes, want at least %d", len(secret), minCredential)
	}
	return &credential{sum: sha256.Sum256([]byte(secret))}, nil
}

// ok compares in constant time; a nil credential accepts nothing.
func (c *credential) ok(password string) bool {
	if c == nil {
		return false
	}
	got := sha256.Sum256([]byte(password))
	return subtle.ConstantTimeCompare(got[:], c.sum[:]) == 1
}

// basicOK checks a Proxy-Authorization header value ("Basic base64(user:pass)").
// The user name is not checked: the password alone is the secret.
func (c *credential) basicOK(header string) bool {
	scheme, b64, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return false
	}
	_, pass, ok := strings.Cut(string(raw), ":")
	return ok && c.ok(pass)
}

// proxyAuthRequired answers 407 and ends the connection.
func (p *Proxy) proxyAuthRequired(s *session, c net.Conn, why string) {
	p.authRefused(s, why)
	p.writeErrorHeader(c, 407, "Proxy-Authenticate: Basic realm=\"oz0 egress proxy\"\r\n",
		"oz0 egress proxy: this endpoint needs the credential of the proxy URL the tool was given (HTTP_PROXY); "+why+"\n")
}

// authLogEvery bounds how often refusals of one plugin's clients are logged: any
// local process can provoke them, and must not flood the node's log.
const authLogEvery = time.Second

// authRefused logs a connection turned away for want of the credential, at most
// once per authLogEvery per plugin, with the count since the last line. What was
// presented is never logged.
func (p *Proxy) authRefused(s *session, why string) {
	pl := s.plugin
	n := pl.authRefused.Add(1)
	if p.cfg.OnRefuse != nil {
		p.cfg.OnRefuse(pl.name, "credential")
	}
	now := time.Now().UnixNano()
	last := pl.authLoggedAt.Load()
	if (last != 0 && now-last < int64(authLogEvery)) || !pl.authLoggedAt.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("egress endpoint refused a client without the plugin's credential",
		"plugin", pl.name, "server", s.server, "remote", s.conn.RemoteAddr().String(), "why", why,
		"refused_since_last_line", n-pl.authLogged.Swap(n))
}

// SOCKS5 username/password authentication (RFC 1929).
const (
	socksUserPass      = 0x02
	socksUserPassVer   = 0x01
	socksUserPassOK    = 0x00
	socksUserPassError = 0x01
)

// socksAuth runs the username/password subnegotiation; false ends the connection.
func (p *Proxy) socksAuth(s *session, br *bufio.Reader) bool {
	c := s.conn
	fail := func(why string) bool {
		p.authRefused(s, why)
		c.Write([]byte{socksUserPassVer, socksUserPassError})
		return false
	}
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return false
	}
	if h[0] != socksUserPassVer {
		return fail(fmt.Sprintf("SOCKS5 username/password version %d", h[0]))
	}
	if _, err := br.Discard(int(h[1])); err != nil { // the user name is not checked
		return false
	}
	l, err := br.ReadByte()
	if err != nil {
		return false
	}
	pass := make([]byte, l)
	if _, err := io.ReadFull(br, pass); err != nil {
		return false
	}
	if !s.cred.ok(string(pass)) {
		return fail("wrong SOCKS5 password")
	}
	c.SetWriteDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	_, err = c.Write([]byte{socksUserPassVer, socksUserPassOK})
	return err == nil
}
