// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// KubeconfigLimit bounds a kubeconfig read: real ones are a few KiB (a
// handful of embedded certificates); 4 MiB is far above any.
var KubeconfigLimit = hostfs.Limit{Kind: "a kubeconfig", Max: 4 << 20}

// kubeconfigFileMax bounds each file a kubeconfig names (a CA bundle of a
// few hundred certificates is well under 1 MiB; a token a few KiB).
const kubeconfigFileMax = 4 << 20

// tokenFileReread is how long a token read from a kubeconfig's tokenFile is
// used before the file is read again (client-go's period for the same
// file: a rotated projected token is picked up within it).
var tokenFileReread = time.Minute

// RESTConfigFromKubeconfig returns the client configuration of the
// kubeconfig at path, as clientcmd.BuildConfigFromFlags("", path) would,
// but reads the file itself: only a regular file, at most KubeconfigLimit
// (clientcmd reads whatever the path names to its end, so a named pipe
// hangs and /dev/zero exhausts memory). Relative paths in the file
// (certificate-authority, client-certificate, tokenFile...) are relative to
// its directory, as clientcmd makes them.
//
// The files the current context names (certificate-authority,
// client-certificate, client-key, tokenFile) are read the same way, each
// a regular file of at most 4 MiB, and handed to client-go as data, so it
// opens none of them: an error names the field and the file. A tokenFile
// is read again through the same reader every minute, as client-go would
// (a rotated token is followed); a failed re-read keeps the last token.
func RESTConfigFromKubeconfig(path string) (*rest.Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	b, err := hostfs.Root{}.ReadFile(abs, KubeconfigLimit)
	if err != nil {
		return nil, err // names the path and why
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, fmt.Errorf("parsing kubeconfig %s: %w", path, err)
	}
	for _, c := range cfg.Clusters {
		c.LocationOfOrigin = abs
	}
	for _, a := range cfg.AuthInfos {
		a.LocationOfOrigin = abs
	}
	for _, c := range cfg.Contexts {
		c.LocationOfOrigin = abs
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	tokenFile, err := inlineFiles(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if tokenFile != nil {
		rc.Wrap(transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(tokenFile)))
	}
	return rc, nil
}

// inlineFiles replaces the file names of the current context's cluster and
// user by their content, read bounded (a field whose -data is set keeps
// its data: client-go lets data win and never reads the file). A tokenFile
// is cleared too (with any static token: client-go would use the file's)
// and returned as the token source that reads it.
func inlineFiles(cfg *clientcmdapi.Config) (oauth2.TokenSource, error) {
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		return nil, nil // clientcmd says what is wrong
	}
	if c := cfg.Clusters[kctx.Cluster]; c != nil {
		if err := inline("certificate-authority", &c.CertificateAuthority, &c.CertificateAuthorityData); err != nil {
			return nil, err
		}
	}
	a := cfg.AuthInfos[kctx.AuthInfo]
	if a == nil {
		return nil, nil
	}
	if err := inline("client-certificate", &a.ClientCertificate, &a.ClientCertificateData); err != nil {
		return nil, err
	}
	if err := inline("client-key", &a.ClientKey, &a.ClientKeyData); err != nil {
		return nil, err
	}
	if a.TokenFile == "" {
		return nil, nil
	}
	ts := &tokenFileSource{path: a.TokenFile}
	if _, err := ts.Token(); err != nil {
		return nil, err
	}
	a.TokenFile, a.Token = "", ""
	return ts, nil
}

// inline reads the file *name names into *data (unless data is set) and
// clears *name.
func inline(field string, name *string, data *[]byte) error {
	if *name == "" {
		return nil
	}
	if len(*data) == 0 {
		b, err := readKubeconfigFile(field, *name)
		if err != nil {
			return err
		}
		*data = b
	}
	*name = ""
	return nil
}

// readKubeconfigFile reads the regular file p a kubeconfig's field names.
func readKubeconfigFile(field, p string) ([]byte, error) {
	b, err := hostfs.Root{}.ReadFile(p, hostfs.Limit{Kind: "a " + field + " file", Max: kubeconfigFileMax})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err) // err names the file
	}
	return b, nil
}

// tokenFileSource reads a kubeconfig's tokenFile through the bounded reader.
type tokenFileSource struct{ path string }

// Token implements oauth2.TokenSource.
func (s *tokenFileSource) Token() (*oauth2.Token, error) {
	b, err := readKubeconfigFile("tokenFile", s.path)
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("tokenFile: %s holds no token", s.path)
	}
	return &oauth2.Token{AccessToken: tok, Expiry: time.Now().Add(tokenFileReread)}, nil
}
