package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egressrule"
)

// CA is the node's own certificate authority for the hosts secrets are bound to
// (docs/promises.md §17): the proxy terminates TLS for those hosts only, with a
// certificate it mints per host, so it can put a secret into the request. Its
// key lives in the node's process and in the data folder (0600), never in a
// sandbox; sandboxes of a plugin with secrets trust its certificate through a
// bundle file (WriteBundle). Leaf certificates are short-lived and cached.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte // the certificate alone

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	// leafRenew is how long before its end a cached leaf is minted again.
	leafRenew = time.Hour
	// maxLeaves bounds the cache; past it the cache starts over.
	maxLeaves = 4096
)

// LoadCA reads the CA (key and certificate, PEM) at path, creating it when
// missing (0600). Two processes creating it at once (a node and an exec beside
// it) end with the same one: it is linked into place only if none is there yet.
// A CA past its end, or one that cannot be read, is an error: nothing replaces a
// CA sandboxes may already trust without the operator.
func LoadCA(path string) (*CA, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createCA(path); err != nil {
			return nil, err
		}
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("egress CA %s: %w", path, err)
	}
	if err := os.Chmod(path, datadir.ModeKey); err != nil {
		return nil, fmt.Errorf("egress CA %s: %w", path, err)
	}
	ca := &CA{leaves: map[string]*tls.Certificate{}}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "CERTIFICATE":
			if ca.cert, err = x509.ParseCertificate(blk.Bytes); err != nil {
				return nil, fmt.Errorf("egress CA %s: certificate: %w", path, err)
			}
			ca.pem = pem.EncodeToMemory(blk)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("egress CA %s: key: %w", path, err)
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("egress CA %s: key is not ECDSA", path)
			}
			ca.key = ek
		}
	}
	switch {
	case ca.cert == nil || ca.key == nil:
		return nil, fmt.Errorf("egress CA %s: needs a certificate and a private key (remove the file to have a new CA made)", path)
	case !ca.key.PublicKey.Equal(ca.cert.PublicKey):
		return nil, fmt.Errorf("egress CA %s: the key does not match the certificate", path)
	case time.Now().After(ca.cert.NotAfter):
		return nil, fmt.Errorf("egress CA %s: expired on %s (remove the file to have a new CA made)", path, ca.cert.NotAfter.Format(time.DateOnly))
	}
	return ca, nil
}

func createCA(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("egress CA: key: %w", err)
	}
	id := make([]byte, 6)
	rand.Read(id)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"oz0-node"}, CommonName: "oz0-node egress CA " + hex.EncodeToString(id)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("egress CA: certificate: %w", err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("egress CA: key: %w", err)
	}
	out := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})...)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".egress-ca-*")
	if err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(datadir.ModeKey); err != nil {
		tmp.Close()
		return fmt.Errorf("egress CA: %w", err)
	}
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("egress CA: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("egress CA: %w", err)
	}
	tmp.Close()
	// Only where none is: another process may have made one a moment ago.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("egress CA %s: %w", path, err)
	}
	return datadir.SyncDir(filepath.Dir(path))
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// CertPEM is the CA's certificate (no key).
func (c *CA) CertPEM() []byte { return c.pem }

// Certificate is the CA's certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// leaf is the certificate the proxy presents for host: minted on first use,
// valid for a day, minted again an hour before it ends.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Add(leafRenew).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

// SystemRootFiles are where systems keep their bundle of trusted roots
// (egressrule.SystemRootFiles).
var SystemRootFiles = egressrule.SystemRootFiles

// hostRoots are the roots the node itself trusts, as PEM: SSL_CERT_FILE where
// the operator set it (as Go reads it), else the first system bundle found.
func hostRoots() ([]byte, string) {
	files := SystemRootFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			return b, f
		}
	}
	return nil, ""
}

// WriteBundle writes the bundle sandboxes of plugins with secrets trust: the
// node's own roots followed by the CA's certificate, 0644 (public certificates
// only), rewritten only when it changed. It says where the roots came from ("" when
// the node found none: then only the bound hosts verify inside).
func (c *CA) WriteBundle(path string) (string, error) {
	roots, from := hostRoots()
	var b bytes.Buffer
	b.Write(roots)
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("# oz0-node egress CA: the node's proxy puts secrets into requests to the hosts they are bound to (docs/promises.md §17)\n")
	b.Write(c.pem)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b.Bytes()) {
		return from, nil
	}
	if err := datadir.WriteFileAtomic(path, b.Bytes(), 0o644); err != nil {
		return from, fmt.Errorf("egress CA bundle: %w", err)
	}
	// The umask may have narrowed it; plugin users read it inside their sandboxes.
	return from, os.Chmod(path, 0o644)
}

// NodeCA is the data folder's egress CA, with its bundle written for sandboxes.
func NodeCA(d datadir.Dir) (*CA, error) {
	ca, err := LoadCA(d.EgressCA())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(d.EgressCABundle()), 0o711); err != nil {
		return nil, fmt.Errorf("egress CA bundle: %w", err)
	}
	if _, err := ca.WriteBundle(d.EgressCABundle()); err != nil {
		return nil, err
	}
	return ca, nil
}
