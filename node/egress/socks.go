package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// SOCKS5 (RFC 1928), CONNECT only; no authentication, or username/password
// (RFC 1929) on endpoints that require the credential.
const (
	socksVersion     = 0x05
	socksNoAuth      = 0x00
	socksNoMethod    = 0xff
	socksCmdConnect  = 0x01
	socksAtypIPv4    = 0x01
	socksAtypDomain  = 0x03
	socksAtypIPv6    = 0x04
	socksOK          = 0x00
	socksFailure     = 0x01
	socksNotAllowed  = 0x02
	socksHostUnreach = 0x04
	socksCmdNotSupp  = 0x07
	socksAtypNotSupp = 0x08
)

// ParseSOCKSRequest reads a SOCKS5 request (after the method negotiation) and
// returns its target. The reply code to send on error is returned with it.
func ParseSOCKSRequest(r io.Reader) (Target, byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Target{}, socksFailure, err
	}
	if h[0] != socksVersion {
		return Target{}, socksFailure, fmt.Errorf("socks: version %d", h[0])
	}
	if h[1] != socksCmdConnect {
		return Target{}, socksCmdNotSupp, fmt.Errorf("socks: command %d is not supported (CONNECT only)", h[1])
	}
	var host string
	switch h[3] {
	case socksAtypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Target{}, socksFailure, err
		}
		host = netip.AddrFrom4(b).String()
	case socksAtypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Target{}, socksFailure, err
		}
		host = "[" + netip.AddrFrom16(b).String() + "]"
	case socksAtypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return Target{}, socksFailure, err
		}
		b := make([]byte, l[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return Target{}, socksFailure, err
		}
		host = string(b)
		if len(host) > 0 && host[0] != '[' {
			if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
				host = "[" + host + "]"
			}
		}
	default:
		return Target{}, socksAtypNotSupp, fmt.Errorf("socks: address type %d is not supported", h[3])
	}
	var pb [2]byte
	if _, err := io.ReadFull(r, pb[:]); err != nil {
		return Target{}, socksFailure, err
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	if port == 0 {
		return Target{}, socksFailure, errors.New("socks: port 0")
	}
	t, err := ParseAuthority(host+":"+strconv.Itoa(port), 0)
	if err != nil {
		return Target{}, socksFailure, fmt.Errorf("socks: %w", err)
	}
	return t, socksOK, nil
}

func socksReply(w io.Writer, code byte) error {
	// The bound address is not meaningful through a proxy; 0.0.0.0:0 says so.
	_, err := w.Write([]byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

func (p *Proxy) serveSOCKS(s *session, br *bufio.Reader, lr *io.LimitedReader) {
	c := s.conn
	var g [2]byte
	if _, err := io.ReadFull(br, g[:]); err != nil {
		return
	}
	methods := make([]byte, g[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	// A host-loopback endpoint takes username/password only (the credential);
	// the others take no authentication only.
	want := byte(socksNoAuth)
	if s.cred != nil {
		want = socksUserPass
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		if s.cred != nil {
			p.authRefused(s, "the SOCKS5 client offered no username/password authentication")
		}
		c.Write([]byte{socksVersion, socksNoMethod})
		return
	}
	if _, err := c.Write([]byte{socksVersion, want}); err != nil {
		return
	}
	if s.cred != nil && !p.socksAuth(s, br) {
		return
	}
	t, code, err := ParseSOCKSRequest(br)
	if err != nil {
		if code != socksFailure || !errors.Is(err, io.EOF) {
			socksReply(c, code)
		}
		return
	}
	c.SetDeadline(time.Time{})
	lr.N = math.MaxInt64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := p.check(s, t, cancel)
	if !v.allow {
		// SOCKS has no room for the explanation: it is in the audit log and status.
		socksReply(c, socksNotAllowed)
		return
	}
	up, addr, err := p.dial(ctx, t)
	if err != nil {
		p.dialFailed(s, t, addr, v, err, func(code int, _ string) {
			if code == http.StatusForbidden {
				socksReply(c, socksNotAllowed)
			} else {
				socksReply(c, socksHostUnreach)
			}
		})
		return
	}
	if !s.attach(up) {
		up.Close()
		p.record(s, t, "end", addr.String(), s.killedWhy(), 0)
		return
	}
	p.record(s, t, "allow", addr.String(), v.rule, 0)
	if err := socksReply(c, socksOK); err != nil {
		p.record(s, t, "end", addr.String(), v.rule, 0)
		return
	}
	n := p.relay(s, t, v.rule, addr.String(), br, up)
	p.record(s, t, "end", addr.String(), endRule(s, v.rule), n)
}
