// SPDX-License-Identifier: Apache-2.0

//go:build chart

// Tests of the Helm chart in deploy/ipvs-guard against the real helm binary
// (and, when one is given, a real API server). Run by `make test-chart`
// (hack/test-chart.sh), which builds helm and sets HELM.
package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

const chartDir = "ipvs-guard"

func helmBin(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "HELM", "helm", "make test-chart builds it")
}

// valueSets are the renderings every test covers.
var valueSets = []struct {
	name string
	set  []string
}{
	{name: "defaults"},
	{name: "report-only", set: []string{"remediation.enabled=false"}},
	{name: "metrics-off", set: []string{"metrics.enabled=false", "dashboard.enabled=false", "cleanupOnUninstall.enabled=false"}},
	{name: "monitoring", set: []string{"metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true", "scheduler=lc", "arp.interface=eth0"}},
	{name: "metrics-tls-secret", set: []string{"metrics.tls.secretName=agent-metrics-tls", "metrics.readers[0].namespace=monitoring",
		"metrics.readers[0].name=prometheus-k8s", "metrics.serviceMonitor.enabled=true", "metrics.bindAddress=::", "health.bindAddress=0.0.0.0"}},
	{name: "metrics-plain", set: []string{"metrics.secure=false", "metrics.serviceMonitor.enabled=true"}},
}

// render runs helm template and returns its output and error output.
func render(t *testing.T, set ...string) (string, string, error) {
	t.Helper()
	args := []string{"template", "ipvs-guard", chartDir, "--namespace", "ipvs-guard"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// object is one rendered document.
type object struct {
	kind, name string
	raw        []byte
}

func split(t *testing.T, manifest string) []object {
	t.Helper()
	var objs []object
	for _, doc := range strings.Split(manifest, "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue
		}
		objs = append(objs, object{kind: meta.Kind, name: meta.Metadata.Name, raw: []byte(doc)})
	}
	return objs
}

func daemonSet(t *testing.T, objs []object) appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if o.kind == "DaemonSet" {
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict(o.raw, &ds); err != nil {
				t.Fatalf("DaemonSet does not decode strictly: %v", err)
			}
			return ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return appsv1.DaemonSet{}
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir}
			for _, s := range vs.set {
				args = append(args, "--set", s)
			}
			if out, err := exec.Command(helmBin(t), args...).CombinedOutput(); err != nil {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// remediationHostPaths are the host paths a remediating pod mounts, with
// their hostPath types: the module tree and every boot declaration
// systemd-modules-load reads (a host lacking /etc/modules gets an empty one,
// which declares nothing).
var remediationHostPaths = map[string]corev1.HostPathType{
	"/lib/modules":                  corev1.HostPathDirectory,
	"/etc/modules":                  corev1.HostPathFileOrCreate,
	"/etc/modules-load.d":           corev1.HostPathDirectoryOrCreate,
	"/run/modules-load.d":           corev1.HostPathDirectoryOrCreate,
	"/usr/local/lib/modules-load.d": corev1.HostPathDirectoryOrCreate,
	"/usr/lib/modules-load.d":       corev1.HostPathDirectoryOrCreate,
	"/lib/modules-load.d":           corev1.HostPathDirectoryOrCreate,
	// kmod's modprobe.d, read-only: what keeps a module from loading.
	"/etc/modprobe.d":           corev1.HostPathDirectoryOrCreate,
	"/run/modprobe.d":           corev1.HostPathDirectoryOrCreate,
	"/usr/local/lib/modprobe.d": corev1.HostPathDirectoryOrCreate,
	"/usr/lib/modprobe.d":       corev1.HostPathDirectoryOrCreate,
	"/lib/modprobe.d":           corev1.HostPathDirectoryOrCreate,
}

// reportOnlyHostPaths are the host paths a report-only pod mounts: the
// directories that hold the module tree and the persistent declarations,
// each of type Directory, so neither the kubelet nor the container runtime
// creates anything on the host.
var reportOnlyHostPaths = map[string]corev1.HostPathType{
	"/etc":           corev1.HostPathDirectory,
	"/lib":           corev1.HostPathDirectory,
	"/usr/lib":       corev1.HostPathDirectory,
	"/usr/local/lib": corev1.HostPathDirectory,
}

func wantHostPaths(reportOnly bool) map[string]corev1.HostPathType {
	if reportOnly {
		return reportOnlyHostPaths
	}
	return remediationHostPaths
}

// bootMounts is the container's mountPath -> readOnly for the host paths:
// all read-only but /etc/modules-load.d, which is writable only with
// remediation (reportOnly false).
func bootMounts(reportOnly bool) map[string]bool {
	m := map[string]bool{}
	for p := range wantHostPaths(reportOnly) {
		m[p] = true
	}
	if !reportOnly {
		m["/etc/modules-load.d"] = false
	}
	return m
}

// TestMountsEveryBootDeclaration checks the chart against the reader: every
// path ScanDeclarations and ReadModprobeDirs read is mounted (remediation)
// or lies under a mounted directory (report-only; /run/modules-load.d and
// /run/modprobe.d, which nothing persists in, aside), so the pod sees what
// systemd and kmod do.
func TestMountsEveryBootDeclaration(t *testing.T) {
	for _, p := range slices.Concat([]string{modules.EtcModules}, modules.ModulesLoadDirs, modules.ModprobeDirs) {
		if _, ok := remediationHostPaths[p]; !ok {
			t.Errorf("the modules reader reads %s, the remediating chart does not mount it", p)
		}
		if p == "/run/modules-load.d" || p == "/run/modprobe.d" {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(reportOnlyHostPaths)), func(dir string) bool {
			return strings.HasPrefix(p, dir+"/")
		}) {
			t.Errorf("the modules reader reads %s, the report-only chart mounts no directory holding it", p)
		}
	}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name        string
		set         []string
		wantKinds   []string
		wantCaps    []corev1.Capability
		wantMounts  map[string]bool // mountPath -> readOnly
		wantArgs    []string
		notWantArgs []string
	}{
		{
			name:        "defaults: remediation on",
			wantKinds:   []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			wantCaps:    []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_MODULE"},
			wantMounts:  bootMounts(false),
			wantArgs:    []string{"run", "--remediate", "--metrics-bind-address=$(HOST_IP):9473", "--metrics-secure=true", "--health-probe-bind-address=$(HOST_IP):9474", "--resync-period=1m", "--kube-proxy-metrics-address=127.0.0.1:10249", "--peers-service=ipvs-guard/ipvs-guard-peers", "--nftables-readiness-interval=1h"},
			notWantArgs: []string{"--remove-own-ipvs-leftovers"},
		},
		{
			name:        "report-only: no SYS_MODULE, no writable host mount",
			set:         []string{"remediation.enabled=false"},
			wantKinds:   []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			wantCaps:    []corev1.Capability{"NET_ADMIN", "NET_RAW"},
			wantMounts:  bootMounts(true),
			wantArgs:    []string{"run", "--metrics-bind-address=$(HOST_IP):9473"},
			notWantArgs: []string{"--remediate"},
		},
		{
			name:        "own IPVS leftovers removed when asked, with remediation",
			set:         []string{"nftablesMigration.removeOwnLeftovers=true", "nftablesMigration.readinessInterval=6h"},
			wantKinds:   []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			wantCaps:    []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_MODULE"},
			wantMounts:  bootMounts(false),
			wantArgs:    []string{"--remediate", "--remove-own-ipvs-leftovers", "--nftables-readiness-interval=6h"},
			notWantArgs: nil,
		},
		{
			name:        "own IPVS leftovers never removed by a report-only agent (its mounts are read-only)",
			set:         []string{"nftablesMigration.removeOwnLeftovers=true", "remediation.enabled=false"},
			wantKinds:   []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			wantCaps:    []corev1.Capability{"NET_ADMIN", "NET_RAW"},
			wantMounts:  bootMounts(true),
			wantArgs:    []string{"--nftables-readiness-interval=1h"},
			notWantArgs: []string{"--remediate", "--remove-own-ipvs-leftovers"},
		},
		{
			name:       "metrics off, no uninstall cleanup: only the peers Service, metrics server disabled, no hook",
			set:        []string{"metrics.enabled=false", "dashboard.enabled=false", "cleanupOnUninstall.enabled=false"},
			wantKinds:  []string{"ClusterRole", "ClusterRoleBinding", "DaemonSet", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			wantCaps:   []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_MODULE"},
			wantMounts: bootMounts(false),
			wantArgs:   []string{"--metrics-bind-address=0", "--health-probe-bind-address=$(HOST_IP):9474"},
		},
		{
			name:       "monitoring: ServiceMonitor, PrometheusRule, scheduler and interface",
			set:        []string{"metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true", "scheduler=lc", "arp.interface=eth0", "rbac.create=false", "admissionPolicy.enabled=false", "serviceAccount.create=false", "serviceAccount.name=agent"},
			wantKinds:  []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"},
			wantCaps:   []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_MODULE"},
			wantMounts: bootMounts(false),
			wantArgs:   []string{"--scheduler=lc", "--interface=eth0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := render(t, tt.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			objs := split(t, out)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.kind)
			}
			sort.Strings(kinds)
			if diff := cmp.Diff(tt.wantKinds, kinds); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			if strings.Contains(out, "privileged: true") {
				t.Error("rendering contains privileged: true")
			}

			ds := daemonSet(t, objs)
			pod := ds.Spec.Template.Spec
			if !pod.HostNetwork {
				t.Error("hostNetwork is not true")
			}
			if pod.HostPID || pod.HostIPC {
				t.Error("hostPID/hostIPC set")
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("got %d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatal("container has no securityContext.capabilities")
			}
			if sc.Privileged == nil || *sc.Privileged {
				t.Error("privileged is not explicitly false")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Error("allowPrivilegeEscalation is not false")
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Error("readOnlyRootFilesystem is not true")
			}
			if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
				t.Errorf("dropped capabilities (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCaps, sc.Capabilities.Add); diff != "" {
				t.Errorf("added capabilities (-want +got):\n%s", diff)
			}
			gotMounts := map[string]bool{}
			for _, m := range c.VolumeMounts {
				gotMounts[m.MountPath] = m.ReadOnly
			}
			if diff := cmp.Diff(tt.wantMounts, gotMounts); diff != "" {
				t.Errorf("volume mounts path->readOnly (-want +got):\n%s", diff)
			}
			gotHostPaths := map[string]corev1.HostPathType{}
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					ty := corev1.HostPathUnset
					if v.HostPath.Type != nil {
						ty = *v.HostPath.Type
					}
					gotHostPaths[v.HostPath.Path] = ty
				}
			}
			reportOnly := !slices.Contains(c.Args, "--remediate")
			if diff := cmp.Diff(wantHostPaths(reportOnly), gotHostPaths); diff != "" {
				t.Errorf("hostPath volumes path->type (-want +got):\n%s", diff)
			}
			for _, m := range c.VolumeMounts {
				for _, v := range pod.Volumes {
					if v.Name == m.Name && (v.HostPath == nil || v.HostPath.Path != m.MountPath) {
						t.Errorf("mount %s is not the host's own path: volume %+v", m.MountPath, v.VolumeSource)
					}
				}
			}
			var nodeName bool
			for _, e := range c.Env {
				if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
					nodeName = true
				}
			}
			if !nodeName {
				t.Error("NODE_NAME does not come from the downward API spec.nodeName")
			}
			memLimit := false
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
					e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name {
					memLimit = true
				}
			}
			if !memLimit {
				t.Error("GOMEMLIMIT does not come from the container's limits.memory (downward API)")
			}
			for _, a := range tt.wantArgs {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %q lack %q", c.Args, a)
				}
			}
			for _, a := range tt.notWantArgs {
				if slices.Contains(c.Args, a) {
					t.Errorf("args %q contain %q", c.Args, a)
				}
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Error("liveness probe is not GET /healthz")
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Error("readiness probe is not GET /readyz")
			}
		})
	}
}

// TestPeersService checks the Service the agents find their peers through,
// whatever the values: headless (kube-proxy ignores it), selecting exactly
// the DaemonSet's pods, not publishing unready ones, in the release
// namespace, and named by the agents' --peers-service.
func TestPeersService(t *testing.T) {
	for _, set := range [][]string{nil, {"metrics.enabled=false", "dashboard.enabled=false"}, {"fullnameOverride=guard"}} {
		out, stderr, err := render(t, set...)
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", set, err, stderr)
		}
		objs := split(t, out)
		ds := daemonSet(t, objs)
		var peers *corev1.Service
		for _, o := range objs {
			if o.kind == "Service" && strings.HasSuffix(o.name, "-peers") {
				peers = &corev1.Service{}
				if err := yaml.UnmarshalStrict(o.raw, peers); err != nil {
					t.Fatalf("peers Service does not decode strictly: %v", err)
				}
			}
		}
		if peers == nil {
			t.Fatalf("%v: no peers Service", set)
		}
		if peers.Spec.ClusterIP != corev1.ClusterIPNone || peers.Spec.PublishNotReadyAddresses {
			t.Errorf("%v: peers Service clusterIP %q publishNotReadyAddresses %v, want headless, ready endpoints only", set, peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses)
		}
		if diff := cmp.Diff(ds.Spec.Selector.MatchLabels, peers.Spec.Selector); diff != "" {
			t.Errorf("%v: peers Service selector differs from the DaemonSet's (-ds +svc):\n%s", set, diff)
		}
		want := "--peers-service=" + peers.Namespace + "/" + peers.Name
		if peers.Namespace != "ipvs-guard" || !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("%v: agent args %q lack %q", set, ds.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
}

// TestPrometheusRuleIsTheTestedFile checks that the PrometheusRule carries
// exactly the groups of files/alerts.yaml, the file promtool tests.
func TestPrometheusRuleIsTheTestedFile(t *testing.T) {
	out, stderr, err := render(t, "prometheusRule.enabled=true")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	for _, o := range split(t, out) {
		if o.kind == "PrometheusRule" {
			if err := yaml.Unmarshal(o.raw, &rule); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Groups) == 0 {
		t.Fatal("alerts.yaml has no groups")
	}
	if diff := cmp.Diff(file.Groups, rule.Spec.Groups); diff != "" {
		t.Errorf("PrometheusRule groups differ from files/alerts.yaml (-file +rule):\n%s", diff)
	}
}

// TestRunbookBaseURL checks that prometheusRule.runbookBaseURL moves every
// alert's runbook_url and nothing else.
func TestRunbookBaseURL(t *testing.T) {
	out, stderr, err := render(t, "prometheusRule.enabled=true", "prometheusRule.runbookBaseURL=https://wiki.example/runbooks")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	for _, o := range split(t, out) {
		if o.kind == "PrometheusRule" {
			if err := yaml.Unmarshal(o.raw, &rule); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if u := r.Annotations["runbook_url"]; !strings.HasPrefix(u, "https://wiki.example/runbooks/") || !strings.HasSuffix(u, ".md") {
				t.Errorf("%s: runbook_url %q, want https://wiki.example/runbooks/<page>.md", r.Alert, u)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts rendered")
	}
}

func TestDashboardConfigMap(t *testing.T) {
	out, stderr, err := render(t)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	for _, o := range split(t, out) {
		if o.kind != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if err := yaml.UnmarshalStrict(o.raw, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard=1", cm.Labels)
		}
		var dash struct {
			Title  string `json:"title"`
			Panels []struct {
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data["ipvs-guard.json"]), &dash); err != nil {
			t.Fatalf("dashboard is not JSON: %v", err)
		}
		var exprs int
		for _, p := range dash.Panels {
			for _, tg := range p.Targets {
				if !strings.Contains(tg.Expr, "ipvs_guard_") && !strings.Contains(tg.Expr, `up{job="ipvs-guard"}`) {
					t.Errorf("panel query %q reads no ipvs-guard metric", tg.Expr)
				}
				exprs++
			}
		}
		if dash.Title != "ipvs-guard" || exprs < 10 {
			t.Errorf("dashboard %q has %d queries, want the ipvs-guard dashboard with at least 10", dash.Title, exprs)
		}
		return
	}
	t.Error("no dashboard ConfigMap rendered")
}

// TestRejectsBadValues checks that the schema and the template guards refuse
// bad values with a message that names the value.
func TestRejectsBadValues(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want string
	}{
		{name: "remediation not a bool", set: []string{"remediation.enabled=yes"}, want: "at '/remediation/enabled': got string, want boolean"},
		{name: "port out of range", set: []string{"metrics.port=70000"}, want: "at '/metrics/port': maximum: got 70,000, want 65,535"},
		{name: "misspelt key", set: []string{"remediaton.enabled=false"}, want: "additional properties 'remediaton' not allowed"},
		{name: "bad pull policy", set: []string{"image.pullPolicy=Sometimes"}, want: "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{name: "bad duration", set: []string{"resyncPeriod=soon"}, want: "at '/resyncPeriod': 'soon' does not match pattern"},
		{name: "log level out of range", set: []string{"logLevel=11"}, want: "at '/logLevel': maximum: got 11, want 10"},
		{name: "bad scheduler", set: []string{"scheduler=Round Robin"}, want: "at '/scheduler'"},
		{name: "ServiceMonitor without metrics", set: []string{"metrics.enabled=false", "metrics.serviceMonitor.enabled=true"}, want: "metrics.serviceMonitor.enabled=true needs metrics.enabled=true"},
		{name: "PrometheusRule without metrics", set: []string{"metrics.enabled=false", "prometheusRule.enabled=true"}, want: "prometheusRule.enabled=true needs metrics.enabled=true"},
		{name: "same port twice", set: []string{"health.port=9473"}, want: "metrics.port and health.port must differ"},
		{name: "no ServiceAccount", set: []string{"serviceAccount.create=false"}, want: "serviceAccount.create=false needs serviceAccount.name"},
		{name: "created namespace is the release namespace", set: []string{"namespace.create=true"}, want: `namespace.create=true needs namespace.name other than the release namespace "ipvs-guard"`},
		{name: "created namespace named as the release namespace", set: []string{"namespace.create=true", "namespace.name=ipvs-guard"}, want: "namespace.create=true needs namespace.name other than the release namespace"},
		{name: "bad Pod Security level", set: []string{"namespace.podSecurity.enforce=root"}, want: "at '/namespace/podSecurity/enforce': value must be one of"},
		{name: "bad namespace name", set: []string{"namespace.name=Agents"}, want: "at '/namespace/name'"},
		{name: "unknown alert disabled", set: []string{"prometheusRule.enabled=true", "prometheusRule.disabled={IPVSGuardNoSuchAlert}"}, want: `prometheusRule.disabled: "IPVSGuardNoSuchAlert" is not a shipped alert`},
		{name: "unknown alert overridden", set: []string{"prometheusRule.enabled=true", "prometheusRule.severityOverrides.IPVSGuardNoSuchAlert=info"}, want: `prometheusRule.severityOverrides: "IPVSGuardNoSuchAlert" is not a shipped alert`},
		{name: "bad tolerate", set: []string{"tolerate=some"}, want: "at '/tolerate': value must be one of 'all', 'control-plane', 'none'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := render(t, tt.set...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want an error containing %q", tt.set, tt.want)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("error output does not contain %q:\n%s", tt.want, stderr)
			}
		})
	}
}

// TestDryRunOnAPIServer applies every rendering with server-side apply in
// dry-run mode to a real kube-apiserver and etcd (internal/apiservertest),
// after installing the monitoring CRDs (MONITORING_CRDS).
func TestDryRunOnAPIServer(t *testing.T) {
	crds := os.Getenv("MONITORING_CRDS")
	testenv.Require(t, crds != "", "no MONITORING_CRDS directory (make test-chart fetches it)")
	kubeconfig := apiservertest.Start(t, apiservertest.Options{}).Kubeconfig
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := kubectl("", "apply", "--server-side", "-f", crds); err != nil {
		t.Fatalf("applying monitoring CRDs: %v\n%s", err, out)
	}
	// kubectl wait fails at once, rather than waiting, on a CRD whose status
	// has no conditions yet (".status.conditions accessor error"): ask again
	// until the deadline.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, err := kubectl("", "wait", "--for=condition=Established", "--timeout=30s", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for CRDs: %v\n%s", err, out)
		}
	}
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ipvs-guard\n"
	if out, err := kubectl(ns, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("creating namespace: %v\n%s", err, out)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			manifest, stderr, err := render(t, vs.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			start := time.Now()
			out, err := kubectl(manifest, "apply", "--server-side", "--dry-run=server", "--field-manager=ipvs-guard-test", "-f", "-")
			took := time.Since(start)
			if err != nil {
				t.Fatalf("kubectl apply --server-side --dry-run=server: %v\n%s", err, out)
			}
			t.Logf("dry-run apply of %d objects took %v:\n%s", len(split(t, manifest)), took.Round(time.Millisecond), out)
			for _, o := range split(t, manifest) {
				if !strings.Contains(out, o.name) {
					t.Errorf("apply output does not mention %s %s", o.kind, o.name)
				}
			}
		})
	}
	t.Run("plain manifest", func(t *testing.T) {
		raw, err := os.ReadFile("manifests/ipvs-guard.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl(string(raw), "apply", "--server-side", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("dry-run apply of deploy/manifests/ipvs-guard.yaml: %v\n%s", err, out)
		}
	})
	// metallb.rbac=auto: a cluster without MetalLB's namespace installs
	// cleanly (no Role in a namespace that does not exist); once the
	// namespace exists, install (or upgrade) creates the Role there.
	t.Run("metallb rbac follows MetalLB's namespace", func(t *testing.T) {
		install := func() string {
			t.Helper()
			cmd := exec.Command(helmBin(t), "install", "ipvs-guard", chartDir, "--namespace", "ipvs-guard",
				"--dry-run=server", "--kubeconfig", kubeconfig)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helm install --dry-run=server: %v\n%s", err, out)
			}
			return string(out)
		}
		if out := install(); strings.Contains(out, "name: ipvs-guard-metallb") {
			t.Errorf("without the metallb-system namespace the chart renders its Role there")
		}
		raw, err := os.ReadFile("manifests/ipvs-guard-metallb.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl(string(raw), "apply", "--server-side", "--dry-run=server", "-f", "-"); err == nil {
			t.Errorf("deploy/manifests/ipvs-guard-metallb.yaml applied with no metallb-system namespace:\n%s", out)
		}
		ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: metallb-system\n"
		if out, err := kubectl(ns, "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("creating namespace: %v\n%s", err, out)
		}
		out := install()
		for _, want := range []string{"kind: Role\nmetadata:\n  name: ipvs-guard-metallb\n  namespace: metallb-system", "kind: RoleBinding\nmetadata:\n  name: ipvs-guard-metallb\n  namespace: metallb-system"} {
			if !strings.Contains(out, want) {
				t.Errorf("with the metallb-system namespace, the install lacks %q", want)
			}
		}
		if out, err := kubectl(string(raw), "apply", "--server-side", "--dry-run=server", "-f", "-"); err != nil {
			t.Errorf("dry-run apply of deploy/manifests/ipvs-guard-metallb.yaml: %v\n%s", err, out)
		}
	})
}

// TestAdmissionPolicyOwnNodeOnly installs the chart for real on the test API
// server and proves the ValidatingAdmissionPolicy: with a token bound to a pod
// on node n1, the agent's ServiceAccount may patch n1's status and metadata,
// but not n2's status, and never n1's spec.
func TestAdmissionPolicyOwnNodeOnly(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	kubeconfig := srv.Kubeconfig
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	const ns, release = "ipvs-guard-vap", "vap"
	// As helm install applies it: hooks are not part of the release.
	args := []string{"template", release, chartDir, "--namespace", ns, "--no-hooks"}
	manifest, err := exec.Command(helmBin(t), args...).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	setup := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n" +
		"---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n" +
		"---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n2\n"
	if out, err := kubectl(setup, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("creating namespace and nodes: %v\n%s", err, out)
	}
	if out, err := kubectl(string(manifest), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("installing the chart: %v\n%s", err, out)
	}
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: agent-n1\n  namespace: " + ns + "\nspec:\n  nodeName: n1\n" +
		"  serviceAccountName: " + release + "-ipvs-guard\n  containers:\n    - name: agent\n      image: localhost/ipvs-guard:test\n"
	if out, err := kubectl(pod, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("creating the agent pod on n1: %v\n%s", err, out)
	}
	token, err := kubectl("", "create", "token", release+"-ipvs-guard", "-n", ns, "--bound-object-kind", "Pod", "--bound-object-name", "agent-n1")
	if err != nil {
		t.Fatalf("creating a pod-bound token: %v\n%s", err, token)
	}
	server := srv.URL
	// asAgent runs kubectl as the agent; a "patch-status" pseudo-command
	// sends the strategic-merge PATCH to nodes/NAME/status the way the agent
	// does (kubectl patch would GET nodes/status first, which the agent's
	// least-privilege role does not allow).
	asAgent := func(args ...string) (string, error) {
		if args[0] == "patch-status" {
			cmd := exec.Command("curl", "-sS", "--cacert", srv.CAFile, "-X", "PATCH", "--fail-with-body",
				"-H", "Authorization: Bearer "+strings.TrimSpace(token),
				"-H", "Content-Type: application/strategic-merge-patch+json",
				"--data", args[2], server+"/api/v1/nodes/"+args[1]+"/status")
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if args[0] == "create-event" {
			event := `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"generateName":"n1-"},` +
				`"eventTime":"2026-01-01T00:00:00.000000Z","reportingController":"ipvs-guard","reportingInstance":"ipvs-guard-n1",` +
				`"action":"IPVSModulesMissing","reason":"ModulesNotLoaded","type":"Warning","note":"test",` +
				`"regarding":{"apiVersion":"v1","kind":"Node","name":"n1"}}`
			cmd := exec.Command("curl", "-sS", "--cacert", srv.CAFile, "-X", "POST", "--fail-with-body",
				"-H", "Authorization: Bearer "+strings.TrimSpace(token),
				"-H", "Content-Type: application/json",
				"--data", event, server+"/apis/events.k8s.io/v1/namespaces/"+args[1]+"/events")
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", os.DevNull, "--server", server,
			"--certificate-authority", srv.CAFile, "--token", strings.TrimSpace(token)}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	condition := `{"status":{"conditions":[{"type":"IPVSModulesMissing","status":"False","reason":"ModulesLoaded","message":"test"}]}}`
	tests := []struct {
		name    string
		args    []string
		wantErr string // empty: must succeed
	}{
		{name: "own node status", args: []string{"patch-status", "n1", condition}},
		{name: "own node annotation", args: []string{"patch", "node", "n1", "--type=merge", "-p", `{"metadata":{"annotations":{"ipvs-guard.io/macs":"02:00:00:00:00:01"}}}`}},
		{name: "other node status", args: []string{"patch-status", "n2", condition},
			wantErr: "ipvs-guard on node n1 may not modify node n2"},
		{name: "own node spec", args: []string{"patch", "node", "n1", "--type=merge", "-p", `{"spec":{"unschedulable":true}}`},
			wantErr: "ipvs-guard may change only annotations on its Node object, never its spec or labels"},
		{name: "own node label", args: []string{"patch", "node", "n1", "--type=merge", "-p", `{"metadata":{"labels":{"x":"y"}}}`},
			wantErr: "ipvs-guard may change only annotations on its Node object, never its spec or labels"},
		{name: "RBAC: event on the node in default", args: []string{"create-event", "default"}},
		{name: "RBAC: no event elsewhere", args: []string{"create-event", ns}, wantErr: "forbidden"},
		{name: "RBAC: no pods", args: []string{"get", "pods", "-n", ns}, wantErr: "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The policy takes effect once the API server's policy
			// informer has it: retry the allowed/denied outcome briefly.
			var out string
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; {
				out, err = asAgent(tt.args...)
				ok := (tt.wantErr == "" && err == nil) || (tt.wantErr != "" && err != nil && strings.Contains(out, tt.wantErr))
				if ok || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if tt.wantErr == "" && err != nil {
				t.Fatalf("kubectl %v as the agent: %v\n%s", tt.args, err, out)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(out, tt.wantErr)) {
				t.Fatalf("kubectl %v as the agent: err %v, output %q; want a denial containing %q", tt.args, err, out, tt.wantErr)
			}
		})
	}
}

// TestArgsAcceptedByBinary checks that the DaemonSet's arguments, for every
// value set, are flags the real `ipvs-guard run` accepts (cobra rejects an
// unknown flag even with --help).
func TestArgsAcceptedByBinary(t *testing.T) {
	bin := ipvsguardtest.Binary(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, stderr, err := render(t, vs.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			objs := split(t, out)
			containers := daemonSet(t, objs).Spec.Template.Spec.Containers
			if job, ok := cleanupJob(t, objs); ok {
				containers = append(containers, job.Spec.Template.Spec.Containers...)
			}
			for _, c := range containers {
				args := append(append([]string{}, c.Args...), "--help")
				if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
					t.Errorf("ipvs-guard %v: %v\n%s", c.Args, err, out)
				}
			}
		})
	}
}

// cleanupJob returns the rendered uninstall cleanup Job, if any.
func cleanupJob(t *testing.T, objs []object) (batchv1.Job, bool) {
	t.Helper()
	for _, o := range objs {
		if o.kind == "Job" {
			var job batchv1.Job
			if err := yaml.UnmarshalStrict(o.raw, &job); err != nil {
				t.Fatalf("Job does not decode strictly: %v", err)
			}
			return job, true
		}
	}
	return batchv1.Job{}, false
}

// renderHook renders only the uninstall cleanup hook, with default values.
func renderHook(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(helmBin(t), "template", "ipvs-guard", chartDir, "--namespace", "ipvs-guard",
		"--show-only", "templates/cleanup-hook.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return string(out)
}

// TestCleanupHook checks the uninstall cleanup hook: every object of it is a
// post-delete hook, deleted once it succeeded; the Job's pod runs
// `ipvs-guard cleanup` as non-root with no capability, no host namespace and
// no host mount; its ClusterRole can list and patch Nodes and patch their
// status, nothing else.
func TestCleanupHook(t *testing.T) {
	out := renderHook(t)
	objs := split(t, out)
	for _, o := range objs {
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(o.raw, &meta); err != nil {
			t.Fatal(err)
		}
		a := meta.Metadata.Annotations
		if a["helm.sh/hook"] != "post-delete" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s %s: hook annotations %v", o.kind, o.name, a)
		}
	}
	job, ok := cleanupJob(t, objs)
	if !ok {
		t.Fatal("no cleanup Job rendered")
	}
	pod := job.Spec.Template.Spec
	if pod.HostNetwork || pod.HostPID || pod.HostIPC || len(pod.Volumes) > 0 {
		t.Errorf("cleanup pod uses host namespaces or volumes: %+v", pod)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("cleanup pod is not runAsNonRoot")
	}
	c := pod.Containers[0]
	if diff := cmp.Diff([]string{"cleanup", "--v=2"}, c.Args); diff != "" {
		t.Errorf("cleanup args (-want +got):\n%s", diff)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("cleanup container security context %+v", sc)
	}
	for _, o := range objs {
		if o.kind != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict(o.raw, &role); err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		}
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("cleanup ClusterRole rules (-want +got):\n%s", diff)
		}
	}
}

// TestCleanupHookOnAPIServer runs the real `ipvs-guard cleanup` with a token
// of the hook's ServiceAccount, bound by the hook's rendered RBAC, on a real
// API server: ipvs-guard's conditions and annotation leave every Node, other
// conditions and annotations stay.
func TestCleanupHookOnAPIServer(t *testing.T) {
	bin := ipvsguardtest.Binary(t)
	srv := apiservertest.Start(t, apiservertest.Options{})
	out := renderHook(t)
	var rbac []string
	for _, o := range split(t, out) {
		if o.kind != "Job" {
			rbac = append(rbac, string(o.raw))
		}
	}
	manifest := filepath.Join(t.TempDir(), "hook.yaml")
	setup := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ipvs-guard\n---\n" + strings.Join(rbac, "\n---\n")
	if err := os.WriteFile(manifest, []byte(setup), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.Apply(ctx, manifest); err != nil {
		t.Fatalf("applying the hook's ServiceAccount and RBAC: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(srv.AdminConfig())
	for _, name := range []string{"n1", "n2"} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"ipvs-guard.io/macs": "eth0=02:00:00:00:00:01", "other.io/keep": "1"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range []string{"Ready", "IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing"} {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(ty), Status: corev1.ConditionFalse, Reason: "Test"})
		}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := cs.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(ctx, "ipvs-guard-cleanup", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the hook's ServiceAccount: %v", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, tok.Status.Token); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect once the API server's informers have the binding.
	var cleanOut []byte
	for deadline := time.Now().Add(20 * time.Second); ; {
		cleanOut, err = exec.Command(bin, "cleanup", "--kubeconfig", kubeconfig).CombinedOutput()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ipvs-guard cleanup as the hook's ServiceAccount: %v\n%s", err, cleanOut)
	}
	for _, name := range []string{"n1", "n2"} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, c := range n.Status.Conditions {
			left = append(left, string(c.Type))
		}
		for k := range n.Annotations {
			left = append(left, k)
		}
		if diff := cmp.Diff([]string{"Ready", "other.io/keep"}, left); diff != "" {
			t.Errorf("node %s after cleanup (-want +got):\n%s", name, diff)
		}
	}
}

// TestNamespace checks namespace.name and namespace.create: by default the
// release namespace holds everything and the chart creates no Namespace;
// with namespace.create the chart creates namespace.name carrying the Pod
// Security labels (privileged unless set otherwise, an empty level left out),
// kept at uninstall, and every namespaced object and reference points there.
func TestNamespace(t *testing.T) {
	tests := []struct {
		name       string
		set        []string
		wantNS     string
		wantLabels map[string]string // nil: no Namespace rendered
	}{
		{name: "defaults", wantNS: "ipvs-guard"},
		{name: "another existing namespace", set: []string{"namespace.name=agents"}, wantNS: "agents"},
		{
			name:   "created, privileged",
			set:    []string{"namespace.create=true", "namespace.name=agents", "namespace.labels.team=net"},
			wantNS: "agents",
			wantLabels: map[string]string{
				"pod-security.kubernetes.io/enforce": "privileged",
				"pod-security.kubernetes.io/audit":   "privileged",
				"pod-security.kubernetes.io/warn":    "privileged",
				"team":                               "net",
			},
		},
		{
			name:   "created, warn left out, audit baseline",
			set:    []string{"namespace.create=true", "namespace.name=agents", "namespace.podSecurity.warn=", "namespace.podSecurity.audit=baseline"},
			wantNS: "agents",
			wantLabels: map[string]string{
				"pod-security.kubernetes.io/enforce": "privileged",
				"pod-security.kubernetes.io/audit":   "baseline",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := render(t, append(tt.set, "prometheusRule.enabled=true", "metrics.serviceMonitor.enabled=true")...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			var gotLabels map[string]string
			for _, o := range split(t, out) {
				var meta metav1.PartialObjectMetadata
				if err := yaml.Unmarshal(o.raw, &meta); err != nil {
					t.Fatal(err)
				}
				switch o.kind {
				case "Namespace":
					if meta.Name != tt.wantNS {
						t.Errorf("Namespace %s rendered, want %s", meta.Name, tt.wantNS)
					}
					if meta.Annotations["helm.sh/resource-policy"] != "keep" {
						t.Errorf("Namespace %s is not kept at uninstall (helm.sh/resource-policy: keep)", meta.Name)
					}
					gotLabels = map[string]string{}
					for k, v := range meta.Labels {
						if strings.HasPrefix(k, "pod-security.kubernetes.io/") || k == "team" {
							gotLabels[k] = v
						}
					}
				case "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				default:
					// The Roles in the namespaces they grant reads in
					// (Events in default, kube-proxy's ConfigMap in
					// kube-system) stay there.
					if meta.Namespace == "default" || meta.Namespace == "kube-system" {
						break
					}
					if meta.Namespace != tt.wantNS {
						t.Errorf("%s %s in namespace %q, want %q", o.kind, meta.Name, meta.Namespace, tt.wantNS)
					}
				}
				// The ServiceAccount subjects, the admission policy's user
				// and the peers Service flag name the same namespace.
				for _, ref := range []string{"system:serviceaccount:ipvs-guard:", "--peers-service=ipvs-guard/", "namespace: ipvs-guard\n"} {
					if tt.wantNS != "ipvs-guard" && strings.Contains(string(o.raw), ref) {
						t.Errorf("%s %s still refers to the release namespace (%q)", o.kind, meta.Name, ref)
					}
				}
			}
			if diff := cmp.Diff(tt.wantLabels, gotLabels); diff != "" {
				t.Errorf("created Namespace's labels (-want +got):\n%s", diff)
			}
		})
	}
}

// alertRules renders the PrometheusRule with set and returns each alert's
// severity label by name.
func alertRules(t *testing.T, set ...string) map[string]string {
	t.Helper()
	out, stderr, err := render(t, append([]string{"prometheusRule.enabled=true"}, set...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert  string            `json:"alert"`
					Labels map[string]string `json:"labels"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	for _, o := range split(t, out) {
		if o.kind == "PrometheusRule" {
			if err := yaml.Unmarshal(o.raw, &rule); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]string{}
	for _, g := range rule.Spec.Groups {
		if len(g.Rules) == 0 {
			t.Error("a rule group rendered empty")
		}
		for _, r := range g.Rules {
			got[r.Alert] = r.Labels["severity"]
		}
	}
	return got
}

// TestAlertSwitches checks prometheusRule.disabled and severityOverrides:
// a disabled alert is absent, an override replaces only that alert's
// severity, everything else is as shipped.
func TestAlertSwitches(t *testing.T) {
	shipped := alertRules(t)
	if shipped["IPVSGuardNodeNotReadyForNftables"] != "info" || shipped["IPVSGuardStrictARPDisabled"] != "warning" {
		t.Fatalf("shipped severities changed: %v", shipped)
	}
	got := alertRules(t,
		"prometheusRule.disabled={IPVSGuardNodeNotReadyForNftables,IPVSGuardIPVSGhostState}",
		"prometheusRule.severityOverrides.IPVSGuardStrictARPDisabled=critical")
	want := maps.Clone(shipped)
	delete(want, "IPVSGuardNodeNotReadyForNftables")
	delete(want, "IPVSGuardIPVSGhostState")
	want["IPVSGuardStrictARPDisabled"] = "critical"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alert -> severity (-want +got):\n%s", diff)
	}
}

// TestTolerate checks the tolerate presets and that tolerations add to them.
func TestTolerate(t *testing.T) {
	cp := []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists},
		{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists},
		{Key: "node-role.kubernetes.io/etcd", Operator: corev1.TolerationOpExists},
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	}
	extra := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "lb", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name string
		set  []string
		want []corev1.Toleration
	}{
		{name: "defaults: every taint", want: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		{name: "control-plane", set: []string{"tolerate=control-plane"}, want: cp},
		{name: "control-plane and an extra one", set: []string{"tolerate=control-plane", "tolerations[0].key=dedicated", "tolerations[0].operator=Equal", "tolerations[0].value=lb", "tolerations[0].effect=NoSchedule"}, want: append(slices.Clone(cp), extra)},
		{name: "none", set: []string{"tolerate=none"}},
		{name: "none and an extra one", set: []string{"tolerate=none", "tolerations[0].key=dedicated", "tolerations[0].operator=Equal", "tolerations[0].value=lb", "tolerations[0].effect=NoSchedule"}, want: []corev1.Toleration{extra}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := render(t, tt.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			if diff := cmp.Diff(tt.want, daemonSet(t, split(t, out)).Spec.Template.Spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMetricsEndpoint checks what the chart makes of the metrics values:
// the listen addresses, HTTPS and its certificate, the review rules of the
// agent, the reader ClusterRole and its binding, and the ServiceMonitor's
// scheme, token and TLS settings.
func TestMetricsEndpoint(t *testing.T) {
	tests := []struct {
		name           string
		set            []string
		wantArgs       []string
		notWantArgs    []string
		reviews        bool     // the agent's ClusterRole may create TokenReviews and SubjectAccessReviews
		readerRole     bool     // ClusterRole ipvs-guard-metrics-reader
		readerSubjects []string // namespace/name bound to it
		tlsVolume      bool
		monitor        string // the ServiceMonitor endpoint's scheme + tlsConfig, "" when none
	}{
		{
			name:        "defaults: HTTPS on the node's IP, self-signed",
			set:         []string{"metrics.serviceMonitor.enabled=true"},
			wantArgs:    []string{"--metrics-bind-address=$(HOST_IP):9473", "--metrics-secure=true", "--health-probe-bind-address=$(HOST_IP):9474"},
			notWantArgs: []string{"--metrics-tls-cert-file=/etc/ipvs-guard/metrics-tls/tls.crt"},
			reviews:     true, readerRole: true,
			monitor: "https /var/run/secrets/kubernetes.io/serviceaccount/token map[insecureSkipVerify:true]",
		},
		{
			name: "a TLS Secret, readers, every interface",
			set: []string{"metrics.tls.secretName=agent-tls", "metrics.readers[0].namespace=monitoring", "metrics.readers[0].name=prometheus-k8s",
				"metrics.bindAddress=::", "health.bindAddress=10.0.0.1", "metrics.serviceMonitor.enabled=true",
				"metrics.serviceMonitor.tlsConfig.serverName=ipvs-guard", "metrics.serviceMonitor.tlsConfig.ca.secret.name=agent-tls", "metrics.serviceMonitor.tlsConfig.ca.secret.key=ca.crt"},
			wantArgs: []string{"--metrics-bind-address=[::]:9473", "--health-probe-bind-address=10.0.0.1:9474",
				"--metrics-tls-cert-file=/etc/ipvs-guard/metrics-tls/tls.crt", "--metrics-tls-key-file=/etc/ipvs-guard/metrics-tls/tls.key"},
			reviews: true, readerRole: true, readerSubjects: []string{"monitoring/prometheus-k8s"}, tlsVolume: true,
			monitor: "https /var/run/secrets/kubernetes.io/serviceaccount/token map[ca:map[secret:map[key:ca.crt name:agent-tls]] serverName:ipvs-guard]",
		},
		{
			name:        "plain HTTP: no reviews, no reader role, no TLS",
			set:         []string{"metrics.secure=false", "metrics.tls.secretName=ignored", "metrics.serviceMonitor.enabled=true"},
			wantArgs:    []string{"--metrics-secure=false"},
			notWantArgs: []string{"--metrics-tls-cert-file=/etc/ipvs-guard/metrics-tls/tls.crt"},
			monitor:     " <nil> map[]",
		},
		{
			name:     "metrics off",
			set:      []string{"metrics.enabled=false", "prometheusRule.enabled=false"},
			wantArgs: []string{"--metrics-bind-address=0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := render(t, tt.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			objs := split(t, out)
			pod := daemonSet(t, objs).Spec.Template.Spec
			c := pod.Containers[0]
			for _, a := range tt.wantArgs {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %q lack %q", c.Args, a)
				}
			}
			for _, a := range tt.notWantArgs {
				if slices.Contains(c.Args, a) {
					t.Errorf("args %q contain %q", c.Args, a)
				}
			}
			hostIP := false
			for _, e := range c.Env {
				if e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP" {
					hostIP = true
				}
			}
			if !hostIP {
				t.Error("HOST_IP does not come from the downward API status.hostIP")
			}
			var tlsVolume bool
			for _, v := range pod.Volumes {
				if v.Name == "metrics-tls" && v.Secret != nil {
					tlsVolume = true
				}
			}
			if tlsVolume != tt.tlsVolume {
				t.Errorf("metrics-tls Secret volume %v, want %v", tlsVolume, tt.tlsVolume)
			}
			var reviews, readerRole bool
			var subjects []string
			monitor := ""
			for _, o := range objs {
				switch {
				case o.kind == "ClusterRole" && o.name == "ipvs-guard":
					var role rbacv1.ClusterRole
					if err := yaml.UnmarshalStrict(o.raw, &role); err != nil {
						t.Fatal(err)
					}
					for _, r := range role.Rules {
						if slices.Contains(r.Resources, "tokenreviews") || slices.Contains(r.Resources, "subjectaccessreviews") {
							if !slices.Equal(r.Verbs, []string{"create"}) {
								t.Errorf("review rule %+v: verbs other than create", r)
							}
							reviews = true
						}
					}
				case o.kind == "ClusterRole" && o.name == "ipvs-guard-metrics-reader":
					var role rbacv1.ClusterRole
					if err := yaml.UnmarshalStrict(o.raw, &role); err != nil {
						t.Fatal(err)
					}
					want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
					if diff := cmp.Diff(want, role.Rules); diff != "" {
						t.Errorf("metrics-reader rules (-want +got):\n%s", diff)
					}
					readerRole = true
				case o.kind == "ClusterRoleBinding" && o.name == "ipvs-guard-metrics-reader":
					var b rbacv1.ClusterRoleBinding
					if err := yaml.UnmarshalStrict(o.raw, &b); err != nil {
						t.Fatal(err)
					}
					if b.RoleRef.Name != "ipvs-guard-metrics-reader" {
						t.Errorf("binding's role %q", b.RoleRef.Name)
					}
					for _, s := range b.Subjects {
						subjects = append(subjects, s.Namespace+"/"+s.Name)
					}
				case o.kind == "ServiceMonitor":
					var sm struct {
						Spec struct {
							Endpoints []struct {
								Scheme          string         `json:"scheme"`
								BearerTokenFile *string        `json:"bearerTokenFile"`
								TLSConfig       map[string]any `json:"tlsConfig"`
							} `json:"endpoints"`
						} `json:"spec"`
					}
					if err := yaml.Unmarshal(o.raw, &sm); err != nil {
						t.Fatal(err)
					}
					e := sm.Spec.Endpoints[0]
					tok := "<nil>"
					if e.BearerTokenFile != nil {
						tok = *e.BearerTokenFile
					}
					if e.TLSConfig == nil {
						e.TLSConfig = map[string]any{}
					}
					monitor = fmt.Sprintf("%s %s %v", e.Scheme, tok, e.TLSConfig)
				}
			}
			if reviews != tt.reviews {
				t.Errorf("agent may create reviews: %v, want %v", reviews, tt.reviews)
			}
			if readerRole != tt.readerRole {
				t.Errorf("metrics-reader ClusterRole rendered: %v, want %v", readerRole, tt.readerRole)
			}
			if !slices.Equal(subjects, tt.readerSubjects) {
				t.Errorf("metrics-reader bound to %v, want %v", subjects, tt.readerSubjects)
			}
			if monitor != tt.monitor {
				t.Errorf("ServiceMonitor endpoint %q, want %q", monitor, tt.monitor)
			}
		})
	}
}
