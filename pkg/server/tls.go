// SPDX-License-Identifier: Apache-2.0

package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// TLSOptions say where a server's certificate comes from.
type TLSOptions struct {
	// CertFile and KeyFile are a PEM certificate (chain) and its key; both
	// or neither. They are read again when either file changes (a renewed
	// Secret or cert-manager certificate is served without a restart).
	CertFile, KeyFile string
	// Host names the self-signed certificate made when no files are given
	// (its subject and first name); IPs are added to its names.
	Host string
	IPs  []net.IP
}

// NewTLSConfig returns the TLS configuration of a server: the certificate
// from o's files, or a self-signed one generated in memory (as
// controller-runtime's secure metrics server does when given none). TLS 1.2
// at least, HTTP/1.1 only (HTTP/2's rapid-reset and stream floods stay out,
// as controller-runtime and kube-rbac-proxy turn it off).
func NewTLSConfig(o TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	switch {
	case o.CertFile == "" && o.KeyFile == "":
		host := o.Host
		if host == "" {
			host = "ipvs-guard"
		}
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, o.IPs, nil)
		if err != nil {
			return nil, fmt.Errorf("generating a self-signed certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("loading the self-signed certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case o.CertFile == "" || o.KeyFile == "":
		return nil, errors.New("a TLS certificate file needs its key file, and a key file its certificate file")
	default:
		r := &keyPairReloader{certFile: o.CertFile, keyFile: o.KeyFile}
		if _, err := r.load(); err != nil {
			return nil, err
		}
		cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.load() }
	}
	return cfg, nil
}

// keyPairReloader serves a certificate and key from files, read again when
// either file's modification time or size changes; a failed re-read keeps
// the last good pair (a Secret update replaces both files at once, but not
// atomically for a reader of two files).
type keyPairReloader struct {
	certFile, keyFile string

	mu     sync.Mutex // guards the fields below
	stamp  [2]fileStamp
	cert   *tls.Certificate
	loaded bool
}

// tlsFileMax bounds a certificate chain or key file (a chain of a few
// certificates is a few KiB).
const tlsFileMax = 1 << 20

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, fmt.Errorf("TLS file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fileStamp{}, fmt.Errorf("TLS file %s: not a regular file", path)
	}
	if fi.Size() > tlsFileMax {
		return fileStamp{}, fmt.Errorf("TLS file %s: %d bytes, more than %d", path, fi.Size(), tlsFileMax)
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

func (r *keyPairReloader) load() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, errC := stampOf(r.certFile)
	ks, errK := stampOf(r.keyFile)
	if err := errors.Join(errC, errK); err != nil {
		if r.loaded {
			return r.cert, nil
		}
		return nil, err
	}
	if r.loaded && r.stamp == [2]fileStamp{cs, ks} {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.loaded {
			return r.cert, nil
		}
		return nil, fmt.Errorf("loading the TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp, r.loaded = &cert, [2]fileStamp{cs, ks}, true
	return r.cert, nil
}
