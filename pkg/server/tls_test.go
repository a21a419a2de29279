// SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// serveTLS starts s with cfg and returns an HTTPS client trusting nothing
// (it checks the served certificate itself).
func serveTLS(t *testing.T, cfg *tls.Config) (*Server, func() *x509.Certificate) {
	t.Helper()
	s, err := NewMux("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.UseTLS(cfg)
	s.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m") }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	get := func() *x509.Certificate {
		c := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}, //nolint:gosec // the test reads the served certificate
			ForceAttemptHTTP2: true, DisableKeepAlives: true,
		}, Timeout: 5 * time.Second}
		resp, err := c.Get("https://" + s.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 1 {
			t.Errorf("served %s, want HTTP/1.1 only", resp.Proto)
		}
		return resp.TLS.PeerCertificates[0]
	}
	return s, get
}

func TestSelfSignedTLS(t *testing.T) {
	cfg, err := NewTLSConfig(TLSOptions{Host: "node-a", IPs: []net.IP{net.ParseIP("192.0.2.7")}})
	if err != nil {
		t.Fatal(err)
	}
	s, get := serveTLS(t, cfg)
	cert := get()
	if err := cert.VerifyHostname("192.0.2.7"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if err := cert.VerifyHostname("node-a"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	// A plain-HTTP request to the HTTPS port gets no metrics.
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS port: %s, want 400", resp.Status)
	}
}

func writePair(t *testing.T, dir, host string) (string, string) {
	t.Helper()
	c, k, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{cf: c, kf: k} {
		tmp := f + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
	}
	return cf, kf
}

// TestFileTLSReloads: the files' certificate is served, and a renewed one
// once the files change; a broken renewal keeps the last good pair.
func TestFileTLSReloads(t *testing.T) {
	dir := t.TempDir()
	cf, kf := writePair(t, dir, "first")
	cfg, err := NewTLSConfig(TLSOptions{CertFile: cf, KeyFile: kf})
	if err != nil {
		t.Fatal(err)
	}
	_, get := serveTLS(t, cfg)
	if cn := get().Subject.CommonName; !strings.HasPrefix(cn, "first@") {
		t.Errorf("served %q, want the first certificate", cn)
	}
	time.Sleep(10 * time.Millisecond) // a distinct modification time
	writePair(t, dir, "second")
	if cn := get().Subject.CommonName; !strings.HasPrefix(cn, "second@") {
		t.Errorf("served %q after renewal, want the second certificate", cn)
	}
	if err := os.WriteFile(kf, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := get().Subject.CommonName; !strings.HasPrefix(cn, "second@") {
		t.Errorf("served %q after a broken renewal, want the last good certificate", cn)
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cf, _ := writePair(t, dir, "x")
	tests := []struct {
		name string
		o    TLSOptions
	}{
		{"cert without key", TLSOptions{CertFile: cf}},
		{"key without cert", TLSOptions{KeyFile: cf}},
		{"missing files", TLSOptions{CertFile: filepath.Join(dir, "no.crt"), KeyFile: filepath.Join(dir, "no.key")}},
		{"key is not a key", TLSOptions{CertFile: cf, KeyFile: cf}},
		{"directory", TLSOptions{CertFile: dir, KeyFile: dir}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewTLSConfig(tt.o); err == nil {
				t.Error("no error")
			} else {
				t.Log(err)
			}
		})
	}
}
