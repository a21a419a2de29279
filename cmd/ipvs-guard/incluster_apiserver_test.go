// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// inClusterAudit records every request of the agent's ServiceAccount.
const inClusterAudit = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["system:serviceaccount:ipvs-guard:ipvs-guard"]
  - level: None
`

// TestDiagnoseInCluster runs the real binary as in the agent's pod: no
// --kubeconfig, KUBERNETES_SERVICE_HOST/PORT set, and the ServiceAccount's
// token and CA at the fixed path client-go reads
// (/var/run/secrets/kubernetes.io/serviceaccount), bind-mounted in a
// private mount namespace. diagnose must read the cluster as that
// ServiceAccount (the API server's audit log says so) and not say
// "node-local checks only"; with the API server's port closed, the error
// names the server and the refused connection.
func TestDiagnoseInCluster(t *testing.T) {
	testenv.RequireRoot(t)
	bin := ipvsguardtest.Binary(t)
	s := apiservertest.Start(t, apiservertest.Options{AuditPolicy: inClusterAudit})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rbac := filepath.Join("..", "..", "deploy", "rbac")
	if err := s.Apply(ctx, filepath.Join(rbac, "serviceaccount.yaml"), filepath.Join(rbac, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(ctx, "ipvs-guard", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa := t.TempDir()
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte("ipvs-guard")} {
		if err := os.WriteFile(filepath.Join(sa, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	root := copyTestTree(t, "debian12")

	// inPod runs diagnose with the service account mounted where
	// rest.InClusterConfig reads it, the API server at host:port.
	inPod := func(t *testing.T, port string, args ...string) (string, string, int) {
		t.Helper()
		script := `set -e
mount --make-rprivate /
mount -t tmpfs tmpfs "$(readlink -f /var/run)"
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
mount --bind "$SA" /var/run/secrets/kubernetes.io/serviceaccount
exec "$@"`
		cmd := exec.Command("unshare", append([]string{"--mount", "sh", "-c", script, "sh", bin, "diagnose", "--root", root, "--node-name", "node-a"}, args...)...)
		cmd.Env = append(os.Environ(), "SA="+sa, "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+port, "KUBECONFIG=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}

	t.Run("reads the cluster as the ServiceAccount", func(t *testing.T) {
		stdout, stderr, code := inPod(t, u.Port(), "-o", "json")
		if strings.Contains(stderr, "node-local checks only") || strings.Contains(stdout, "NoKubeconfig") {
			t.Errorf("diagnose in the pod ran node-local checks only:\n%s\n%s", stderr, stdout)
		}
		var rep struct {
			Checks []struct{ Name, Status, Reason, Message string }
			Error  string
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Error != "" {
			t.Fatalf("exit %d, report %v %q:\n%s\n%s", code, err, rep.Error, stdout, stderr)
		}
		for _, c := range rep.Checks {
			if c.Status == "error" {
				t.Errorf("check %s errored: %s", c.Name, c.Message)
			}
		}
		lists := auditedLists(t, s.AuditLog)
		for _, want := range []string{"/api/v1/services", "/api/v1/nodes"} {
			if lists[want] == 0 {
				t.Errorf("the ServiceAccount never listed %s (audited: %v)", want, lists)
			}
		}
	})
	t.Run("unreachable API server named with the dial error", func(t *testing.T) {
		port := strings.TrimPrefix(closedPort(t), "127.0.0.1:")
		stdout, stderr, code := inPod(t, port)
		out := stdout + stderr
		// Exit 1: the captured tree's modules are a problem too.
		if code == 0 || !strings.Contains(out, "https://"+u.Hostname()+":"+port+"/") || !strings.Contains(out, "connect: connection refused") {
			t.Errorf("exit %d, want the server https://%s:%s named with the refused connection:\n%s", code, u.Hostname(), port, out)
		}
	})
}

// auditedLists counts the list requests of the audit log at path by path.
func auditedLists(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lists := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Verb != "list" {
			continue
		}
		p, _, _ := strings.Cut(ev.RequestURI, "?")
		lists[p]++
	}
	return lists
}
