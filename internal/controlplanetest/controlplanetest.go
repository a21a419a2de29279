// SPDX-License-Identifier: Apache-2.0

package controlplanetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// The users the components authenticate as; Kubernetes' bootstrap RBAC
// policy gives each its role (system:kube-controller-manager,
// system:kube-scheduler).
const (
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
)

// Users are the API server users the control plane needs: append them to
// apiservertest.Options.Users (ServerOptions does).
var Users = []apiservertest.User{{Name: ControllerManagerUser}, {Name: SchedulerUser}}

// ServerOptions returns o with the control plane's Users added, for
// apiservertest.Start/StartServer.
func ServerOptions(o apiservertest.Options) apiservertest.Options {
	o.Users = append(append([]apiservertest.User(nil), o.Users...), Users...)
	return o
}

// PodSecurityExemptNamespaces are the namespaces RKE2's CIS profile exempts
// from its cluster-wide restricted Pod Security level (rancher/rke2
// pkg/rke2/psa.go).
var PodSecurityExemptNamespaces = []string{"kube-system", "cis-operator-system", "tigera-operator"}

// PodSecurityRestricted returns o with the PodSecurity admission plugin (on
// by default) configured as RKE2's CIS profile configures it: every
// namespace enforces, audits and warns the restricted level unless its
// pod-security.kubernetes.io labels say otherwise, and
// PodSecurityExemptNamespaces are exempt. The AdmissionConfiguration is
// written to a temporary directory of t.
func PodSecurityRestricted(t testing.TB, o apiservertest.Options) apiservertest.Options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admission.yaml")
	var exempt strings.Builder
	for _, ns := range PodSecurityExemptNamespaces {
		fmt.Fprintf(&exempt, "\n      - %s", ns)
	}
	config := `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: restricted
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces:` + exempt.String() + "\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	o.ExtraFlags = append(append([]string(nil), o.ExtraFlags...), "--admission-control-config-file="+path)
	return o
}

// Options configures a Server. Zero values pick defaults.
type Options struct {
	// API is the running API server, started with ServerOptions.
	API *apiservertest.Server
	// ControllerManager is the kube-controller-manager binary; default
	// $KUBE_CONTROLLER_MANAGER, else apiservertest.CachedBinary's.
	ControllerManager string
	// Scheduler is the kube-scheduler binary; default $KUBE_SCHEDULER, else
	// apiservertest.CachedBinary's.
	Scheduler string
	// Dir holds kubeconfigs, serving certificates and logs; empty makes a
	// directory under API.Dir.
	Dir string
	// Stdout receives both components' logs; nil writes them to files in Dir.
	Stdout io.Writer
	// ControllerManagerFlags are appended to kube-controller-manager's flags.
	ControllerManagerFlags []string
}

// Server is a running kube-controller-manager + kube-scheduler pair.
type Server struct {
	// Dir is the working directory (kubeconfigs, certificates, logs).
	Dir string

	opts Options
	// mu guards the two processes.
	mu         sync.Mutex
	kcm, sched *apiservertest.Process
}

// BinaryPaths returns the kube-controller-manager and kube-scheduler paths
// StartServer would use.
func BinaryPaths(o Options) (controllerManager, scheduler string) {
	pick := func(set, env, name string) string {
		if set != "" {
			return set
		}
		if p := os.Getenv(env); p != "" {
			return p
		}
		return apiservertest.CachedBinary(name)
	}
	return pick(o.ControllerManager, "KUBE_CONTROLLER_MANAGER", "kube-controller-manager"),
		pick(o.Scheduler, "KUBE_SCHEDULER", "kube-scheduler")
}

// Start starts the control plane for t and stops it in t.Cleanup. Without
// the binaries the test is skipped (failed under CI=true).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	kcm, sched := BinaryPaths(o)
	_, errK := os.Stat(kcm)
	_, errS := os.Stat(sched)
	testenv.Require(t, errK == nil && errS == nil,
		fmt.Sprintf("kube-controller-manager (%s) and kube-scheduler (%s) are needed: run hack/apiserver/install.sh kube-controller-manager kube-scheduler", kcm, sched))
	s, err := StartServer(context.Background(), o)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartServer starts kube-controller-manager and kube-scheduler and waits
// for both to answer /healthz. Call Close when done.
func StartServer(ctx context.Context, o Options) (*Server, error) {
	if o.API == nil {
		return nil, errors.New("controlplanetest: Options.API is required")
	}
	for _, u := range Users {
		if o.API.Tokens[u.Name] == "" {
			return nil, fmt.Errorf("controlplanetest: the API server has no token for %s: start it with ServerOptions", u.Name)
		}
	}
	o.ControllerManager, o.Scheduler = BinaryPaths(o)
	if o.Dir == "" {
		o.Dir = filepath.Join(o.API.Dir, "controlplane")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{Dir: o.Dir, opts: o}
	ports, err := apiservertest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	kcm, err := s.start(ctx, "kube-controller-manager", o.ControllerManager, ControllerManagerUser, ports[0], append([]string{
		// Controllers run as their own service accounts with the
		// bootstrap roles, as kubeadm runs them.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + o.API.ServiceAccountKeyFile,
		// Published as kube-root-ca.crt in every namespace.
		"--root-ca-file=" + o.API.CAFile,
	}, o.ControllerManagerFlags...))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.kcm = kcm
	s.mu.Unlock()
	sched, err := s.start(ctx, "kube-scheduler", o.Scheduler, SchedulerUser, ports[1], nil)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.mu.Lock()
	s.sched = sched
	s.mu.Unlock()
	return s, nil
}

// start runs one component as user, serving /healthz on port, and waits
// for it.
func (s *Server) start(ctx context.Context, name, bin, user string, port int, extra []string) (*apiservertest.Process, error) {
	kubeconfig := filepath.Join(s.Dir, name+".kubeconfig")
	if err := s.opts.API.WriteKubeconfig(kubeconfig, s.opts.API.Tokens[user]); err != nil {
		return nil, err
	}
	out := s.opts.Stdout
	if out == nil {
		f, err := os.OpenFile(filepath.Join(s.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child keeps its own descriptor
		out = f
	}
	certDir := filepath.Join(s.Dir, name+"-certs")
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--v=0",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := apiservertest.StartProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if err := p.WaitReady(ctx, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "", 60*time.Second); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s (log in %s): %w", name, s.Dir, err)
	}
	return p, nil
}

// Close stops both components.
func (s *Server) Close() {
	s.mu.Lock()
	kcm, sched := s.kcm, s.sched
	s.kcm, s.sched = nil, nil
	s.mu.Unlock()
	sched.Stop()
	kcm.Stop()
}
