// SPDX-License-Identifier: Apache-2.0

package apiservertest

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/proc"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// KubeVersion is the kube-apiserver version hack/apiserver/install.sh builds.
const KubeVersion = "v1.37.1"

// ServiceCIDR is the default Service cluster IP range (room for thousands of
// Services; the API server's own Service gets 10.96.0.1).
const ServiceCIDR = "10.96.0.0/16"

// DualStackServiceCIDR is an IPv4-primary dual-stack Service range for
// Options.ServiceCIDR: ServiceCIDR and an IPv6 /112 beside it.
const DualStackServiceCIDR = ServiceCIDR + ",fd00:10:96::/112"

// AdminUser is the user of the admin token (group system:masters).
const AdminUser = "admin"

// CertName is a name the API server's self-signed certificate always
// carries; clients check the certificate against it, so the same
// configuration works whether the server binds to loopback (its certificate
// then names 127.0.0.1 too) or to every address (Options.ExtraFlags
// --bind-address=0.0.0.0, to be reached from network namespaces).
const CertName = "kubernetes"

// Options configures a Server. Zero values pick defaults.
type Options struct {
	// Dir holds etcd data, certificates, keys and logs; empty makes a temporary one.
	Dir string
	// APIServer is the kube-apiserver binary; default $KUBE_APISERVER, else
	// $IPVS_GUARD_CACHE/kube-apiserver/<KubeVersion>/kube-apiserver.
	APIServer string
	// Etcd is the etcd binary; default $ETCD, else etcd on $PATH.
	Etcd string
	// ExtraFlags are appended to kube-apiserver's flags; an
	// --authorization-mode among them replaces the default RBAC.
	ExtraFlags []string
	// Stdout receives both processes' logs; nil writes them to files in Dir.
	Stdout io.Writer
	// ServiceCIDR overrides the Service cluster IP range (default
	// ServiceCIDR). Two ranges, one per family and comma-separated (e.g.
	// DualStackServiceCIDR), make a dual-stack cluster: Services may then ask
	// for ipFamilyPolicy PreferDualStack or RequireDualStack.
	ServiceCIDR string
	// AuditPolicy, when set, is an audit policy (YAML); the API server then
	// writes its audit log, one JSON event per line, to Server.AuditLog.
	AuditPolicy string
	// Users get a static token each besides the admin (Server.Tokens), e.g.
	// system:kube-scheduler for a component with its bootstrap RBAC role.
	Users []User
}

// User is a user of the static token file.
type User struct {
	// Name is the user name, e.g. system:kube-controller-manager.
	Name string
	// Groups are the user's groups, e.g. system:nodes.
	Groups []string
}

// Server is a running etcd + kube-apiserver pair.
type Server struct {
	// URL is https://127.0.0.1:<port>.
	URL string
	// AdminToken authenticates as AdminUser in system:masters.
	AdminToken string
	// CAFile verifies the API server's self-signed certificate (it names 127.0.0.1).
	CAFile string
	// Dir is the working directory (data, certs, logs, kubeconfig).
	Dir string
	// Kubeconfig is a kubeconfig file for the admin.
	Kubeconfig string
	// AuditLog is the audit log file when Options.AuditPolicy is set.
	AuditLog string
	// Tokens maps each of Options.Users' names to its token.
	Tokens map[string]string
	// ServiceAccountKeyFile is the PEM RSA key the API server signs and
	// verifies service-account tokens with (a controller manager's
	// --service-account-private-key-file).
	ServiceAccountKeyFile string

	opts     Options
	apiPort  int
	etcdURL  string
	etcdPeer string

	// mu guards the two processes.
	mu        sync.Mutex
	etcd, api *Process
}

// Process is a started component process, killed when the test process
// dies (Pdeathsig). The other component packages (controlplanetest, nodevm)
// start theirs the same way.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess starts cmd and reaps it in the background.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	cmd.SysProcAttr = proc.Attr(false)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Done is closed once the process has exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process' exit error, valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM, then SIGKILL after 10 s, and waits for the exit. A nil
// Process is a no-op.
func (p *Process) Stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// BinaryPaths returns the kube-apiserver and etcd paths Start would use.
func BinaryPaths(o Options) (apiserver, etcd string) {
	apiserver = o.APIServer
	if apiserver == "" {
		apiserver = os.Getenv("KUBE_APISERVER")
	}
	if apiserver == "" {
		apiserver = CachedBinary("kube-apiserver")
	}
	etcd = o.Etcd
	if etcd == "" {
		etcd = os.Getenv("ETCD")
	}
	if etcd == "" {
		if p, err := exec.LookPath("etcd"); err == nil {
			etcd = p
		} else {
			etcd = "etcd"
		}
	}
	return apiserver, etcd
}

// CachedBinary is where hack/apiserver/install.sh caches the
// k8s.io/kubernetes command name at KubeVersion:
// $IPVS_GUARD_CACHE/<name>/<KubeVersion>/<name>, by default under the
// checkout's .cache.
func CachedBinary(name string) string {
	cache := os.Getenv("IPVS_GUARD_CACHE")
	if cache == "" {
		cache = filepath.Join(repoRoot(), ".cache")
	}
	return filepath.Join(cache, name, KubeVersion, name)
}

func repoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Start starts etcd and kube-apiserver for t and stops them in t.Cleanup.
// Without the binaries the test is skipped (failed under CI=true).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	api, etcd := BinaryPaths(o)
	_, errA := os.Stat(api)
	_, errE := exec.LookPath(etcd)
	testenv.Require(t, errA == nil && errE == nil,
		fmt.Sprintf("kube-apiserver (%s) and etcd (%s) are needed: run hack/apiserver/install.sh", api, etcd))
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	o.APIServer, o.Etcd = api, etcd
	s, err := StartServer(context.Background(), o)
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartServer starts etcd and kube-apiserver and waits for /readyz. Call Close when done.
func StartServer(ctx context.Context, o Options) (*Server, error) {
	api, etcd := BinaryPaths(o)
	o.APIServer, o.Etcd = api, etcd
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "apiservertest-")
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: o, Dir: o.Dir, apiPort: ports[0],
		URL:      "https://127.0.0.1:" + strconv.Itoa(ports[0]),
		etcdURL:  "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		etcdPeer: "http://127.0.0.1:" + strconv.Itoa(ports[2]),
		CAFile:   filepath.Join(o.Dir, "certs", "apiserver.crt"),
	}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	if err := s.startEtcd(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.StartAPIServer(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.writeKubeconfig(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func (s *Server) prepare() error {
	for _, d := range []string{"certs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o700); err != nil {
			return err
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	s.ServiceAccountKeyFile = filepath.Join(s.Dir, "sa.key")
	if err := os.WriteFile(s.ServiceAccountKeyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	newToken := func() (string, error) {
		tok := make([]byte, 16)
		_, err := rand.Read(tok)
		return fmt.Sprintf("%x", tok), err
	}
	if s.AdminToken, err = newToken(); err != nil {
		return err
	}
	csv := fmt.Sprintf("%s,%s,admin-uid,\"system:masters\"\n", s.AdminToken, AdminUser)
	s.Tokens = map[string]string{}
	for i, u := range s.opts.Users {
		tok, err := newToken()
		if err != nil {
			return err
		}
		s.Tokens[u.Name] = tok
		csv += fmt.Sprintf("%s,%s,user-%d-uid,\"%s\"\n", tok, u.Name, i, strings.Join(u.Groups, ","))
	}
	return os.WriteFile(filepath.Join(s.Dir, "tokens.csv"), []byte(csv), 0o600)
}

func (s *Server) logTo(name string) (io.Writer, error) {
	if s.opts.Stdout != nil {
		return s.opts.Stdout, nil
	}
	return os.OpenFile(filepath.Join(s.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

func (s *Server) startEtcd(ctx context.Context) error {
	out, err := s.logTo("etcd")
	if err != nil {
		return err
	}
	cmd := exec.Command(s.opts.Etcd,
		"--name=default",
		"--data-dir="+filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls="+s.etcdURL, "--advertise-client-urls="+s.etcdURL,
		"--listen-peer-urls="+s.etcdPeer, "--initial-advertise-peer-urls="+s.etcdPeer,
		"--initial-cluster=default="+s.etcdPeer,
		"--unsafe-no-fsync", "--log-level=warn", "--logger=zap",
	)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := StartProcess(cmd)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	s.mu.Lock()
	s.etcd = p
	s.mu.Unlock()
	return WaitHTTP(ctx, http.DefaultClient, s.etcdURL+"/health", "", 30*time.Second)
}

// StartAPIServer (re)starts kube-apiserver on the same port and waits for
// /readyz; use it after StopAPIServer to end a simulated outage.
func (s *Server) StartAPIServer(ctx context.Context) error {
	out, err := s.logTo("kube-apiserver")
	if err != nil {
		return err
	}
	args := []string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.apiPort),
		"--cert-dir=" + filepath.Join(s.Dir, "certs"),
		"--etcd-servers=" + s.etcdURL,
		"--service-cluster-ip-range=" + cmp.Or(s.opts.ServiceCIDR, ServiceCIDR),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-signing-key-file=" + filepath.Join(s.Dir, "sa.key"),
		"--service-account-key-file=" + filepath.Join(s.Dir, "sa.pub"),
		"--token-auth-file=" + filepath.Join(s.Dir, "tokens.csv"),
		"--endpoint-reconciler-type=none",
		"--v=0",
	}
	// --authorization-mode is a list flag: a second one would add to the
	// first, not replace it.
	if !slices.ContainsFunc(s.opts.ExtraFlags, func(f string) bool { return strings.HasPrefix(f, "--authorization-mode=") }) {
		args = append(args, "--authorization-mode=RBAC")
	}
	if s.opts.AuditPolicy != "" {
		policy := filepath.Join(s.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(s.opts.AuditPolicy), 0o600); err != nil {
			return err
		}
		s.AuditLog = filepath.Join(s.Dir, "audit.log")
		args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+s.AuditLog, "--audit-log-format=json", "--audit-log-mode=blocking")
	}
	args = append(args, s.opts.ExtraFlags...)
	cmd := exec.Command(s.opts.APIServer, args...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := StartProcess(cmd)
	if err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	s.mu.Lock()
	s.api = p
	s.mu.Unlock()
	if err := p.WaitReady(ctx, s.URL+"/readyz", s.AdminToken, 90*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver (log in %s): %w", s.Dir, err)
	}
	return nil
}

// WaitReady polls the process' HTTPS health endpoint url (certificate not
// verified: a readiness poll only) until it answers 200 OK, the process
// exits or timeout passes.
func (p *Process) WaitReady(ctx context.Context, url, token string, timeout time.Duration) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- WaitHTTP(wctx, client, url, token, timeout) }()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		return nil
	case <-p.Done():
		return fmt.Errorf("exited during start: %v", p.Err())
	}
}

// StopAPIServer stops kube-apiserver (etcd keeps running), to simulate an outage.
func (s *Server) StopAPIServer() {
	s.mu.Lock()
	p := s.api
	s.api = nil
	s.mu.Unlock()
	p.Stop()
}

// PIDs returns the process ids of kube-apiserver and etcd (0 for one that
// is not running), e.g. to read their CPU time from /proc.
func (s *Server) PIDs() (apiserver, etcd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api != nil {
		apiserver = s.api.cmd.Process.Pid
	}
	if s.etcd != nil {
		etcd = s.etcd.cmd.Process.Pid
	}
	return apiserver, etcd
}

// Close stops both processes.
func (s *Server) Close() {
	s.StopAPIServer()
	s.mu.Lock()
	p := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	p.Stop()
}

// WaitHTTP polls url (with token as a bearer token, if any) every 100 ms
// until it answers 200 OK or timeout passes.
func WaitHTTP(ctx context.Context, c *http.Client, url, token string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		last = err
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Config returns a rest.Config authenticating with token (AdminToken for the admin).
func (s *Server) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile, ServerName: CertName},
		QPS:             100,
		Burst:           200,
	}
}

// AdminConfig returns a rest.Config for the admin (system:masters).
func (s *Server) AdminConfig() *rest.Config { return s.Config(s.AdminToken) }

// WriteKubeconfig writes a kubeconfig for token to path.
func (s *Server) WriteKubeconfig(path, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["apiservertest"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthority: s.CAFile, TLSServerName: CertName}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["apiservertest"] = &clientcmdapi.Context{Cluster: "apiservertest", AuthInfo: "user"}
	cfg.CurrentContext = "apiservertest"
	return clientcmd.WriteToFile(*cfg, path)
}

func (s *Server) writeKubeconfig() error {
	s.Kubeconfig = filepath.Join(s.Dir, "kubeconfig")
	return s.WriteKubeconfig(s.Kubeconfig, s.AdminToken)
}
