// SPDX-License-Identifier: Apache-2.0

package nodevm

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
)

// NodeName is the node's hostname (hack/node/rootfs.sh writes /etc/hostname)
// and the name its kubelet registers.
const NodeName = "debian-node"

// The API server users of the node's components: the kubelet's node
// identity (the Node authorizer and NodeRestriction admit it for its own
// Node and the pods bound to it) and kube-proxy's (the bootstrap
// system:node-proxier binding).
const (
	KubeletUser   = "system:node:" + NodeName
	KubeProxyUser = "system:kube-proxy"
)

// KubeletUsers are the API server users the kubelet node needs: append them
// to apiservertest.Options.Users (KubeletServerOptions does).
var KubeletUsers = []apiservertest.User{
	{Name: KubeletUser, Groups: []string{"system:nodes"}},
	{Name: KubeProxyUser},
}

// KubeletServerOptions returns o with the node's users added and the API
// server authorizing kubelets as a cluster does: the Node authorizer before
// RBAC and the NodeRestriction admission plugin.
func KubeletServerOptions(o apiservertest.Options) apiservertest.Options {
	o.Users = append(append([]apiservertest.User(nil), o.Users...), KubeletUsers...)
	o.ExtraFlags = append(append([]string(nil), o.ExtraFlags...),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction")
	return o
}

//go:embed kubelet
var kubeletFiles embed.FS

// KubeletOptions configures the node's Kubernetes components. Zero values
// pick defaults.
type KubeletOptions struct {
	// API is the host's API server, started with KubeletServerOptions.
	API *apiservertest.Server
	// Kubelet and KubeProxy are the binaries; default
	// apiservertest.CachedBinary's.
	Kubelet, KubeProxy string
	// Containerd is the directory hack/ensure-containerd.sh printed
	// (containerd, containerd-shim-runc-v2, ctr); default $CONTAINERD_DIR.
	Containerd string
	// Images are docker archives imported into containerd's k8s.io
	// namespace before the kubelet first starts; they must include the
	// sandbox image localhost/pause:node (hack/node/images.sh pause).
	Images []string
}

// KubeletFiles returns the Files that make the Debian node a Kubernetes
// node of o.API: containerd 2.x with runc and Debian's CNI plugins (a bridge
// network config, so the runtime reports its network ready), the images
// imported offline, the kubelet with its node identity, kube-proxy in IPVS
// mode as a host process, all as systemd units enabled at boot, and
// systemd-networkd giving the node GuestAddr. Use with Options.Net.
func KubeletFiles(o KubeletOptions) (map[string]File, error) {
	if o.API == nil {
		return nil, errors.New("nodevm: KubeletOptions.API is required")
	}
	for _, u := range KubeletUsers {
		if o.API.Tokens[u.Name] == "" {
			return nil, fmt.Errorf("nodevm: the API server has no token for %s: start it with KubeletServerOptions", u.Name)
		}
	}
	o.Kubelet = cmp.Or(o.Kubelet, apiservertest.CachedBinary("kubelet"))
	o.KubeProxy = cmp.Or(o.KubeProxy, apiservertest.CachedBinary("kube-proxy"))
	o.Containerd = cmp.Or(o.Containerd, os.Getenv("CONTAINERD_DIR"))
	if o.Containerd == "" {
		return nil, errors.New("nodevm: no containerd: set KubeletOptions.Containerd or CONTAINERD_DIR (hack/ensure-containerd.sh)")
	}
	bins := map[string]string{
		"kubelet":                 o.Kubelet,
		"kube-proxy":              o.KubeProxy,
		"containerd":              filepath.Join(o.Containerd, "containerd"),
		"containerd-shim-runc-v2": filepath.Join(o.Containerd, "containerd-shim-runc-v2"),
		"ctr":                     filepath.Join(o.Containerd, "ctr"),
	}
	files := map[string]File{}
	for name, src := range bins {
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("nodevm: %s: %w", name, err)
		}
		files["/usr/local/bin/"+name] = File{Source: src, Mode: 0o755}
	}
	for i, img := range o.Images {
		if _, err := os.Stat(img); err != nil {
			return nil, fmt.Errorf("nodevm: image archive: %w", err)
		}
		files[fmt.Sprintf("/var/lib/node-images/%02d-%s", i, filepath.Base(img))] = File{Source: img}
	}
	for path, kubeconfig := range map[string]string{
		"/etc/kubernetes/kubelet.conf":    KubeletUser,
		"/etc/kubernetes/kube-proxy.conf": KubeProxyUser,
	} {
		data, err := GuestKubeconfig(o.API, o.API.Tokens[kubeconfig])
		if err != nil {
			return nil, err
		}
		files[path] = File{Data: data, Mode: 0o600}
	}
	embedded := map[string]string{
		"10-qemu.network":     "/etc/systemd/network/10-qemu.network",
		"10-node.conflist":    "/etc/cni/net.d/10-node.conflist",
		"config.toml":         "/etc/containerd/config.toml",
		"kubelet-config.yaml": "/etc/kubernetes/kubelet-config.yaml",
	}
	wants := "/etc/systemd/system/multi-user.target.wants/"
	for _, unit := range []string{"containerd.service", "node-images.service", "kubelet.service", "kube-proxy.service"} {
		embedded[unit] = "/etc/systemd/system/" + unit
		files[wants+unit] = File{Link: "/etc/systemd/system/" + unit}
	}
	files[wants+"systemd-networkd.service"] = File{Link: "/lib/systemd/system/systemd-networkd.service"}
	for name, path := range embedded {
		data, err := kubeletFiles.ReadFile("kubelet/" + name)
		if err != nil {
			return nil, err
		}
		files[path] = File{Data: string(data)}
	}
	return files, nil
}

// GuestKubeconfig is a kubeconfig for token as the guest reaches srv: at
// HostAddr, checking the self-signed certificate against
// apiservertest.CertName.
func GuestKubeconfig(srv *apiservertest.Server, token string) (string, error) {
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["host"] = &clientcmdapi.Cluster{Server: "https://" + HostAddr + ":" + apiPort(srv), CertificateAuthorityData: ca, TLSServerName: apiservertest.CertName}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["host"] = &clientcmdapi.Context{Cluster: "host", AuthInfo: "user"}
	cfg.CurrentContext = "host"
	raw, err := clientcmd.Write(*cfg)
	return string(raw), err
}

func apiPort(srv *apiservertest.Server) string {
	return srv.URL[strings.LastIndex(srv.URL, ":")+1:]
}

// PublishAPIServer points the default/kubernetes Service at the host's API
// server as the guest reaches it (HostAddr), as the API server's endpoint
// reconciler would for a reachable address: pods' in-cluster clients
// (KUBERNETES_SERVICE_HOST, the Service's ClusterIP) then reach it through
// kube-proxy on the node. apiservertest runs the API server with
// --endpoint-reconciler-type=none, so nothing overwrites this.
func PublishAPIServer(ctx context.Context, cs kubernetes.Interface, srv *apiservertest.Server) error {
	port, err := strconv.Atoi(apiPort(srv))
	if err != nil {
		return fmt.Errorf("the API server's port: %w", err)
	}
	name, proto := "https", corev1.ProtocolTCP
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes",
			discoveryv1.LabelManagedBy:   "nodevm.ipvs-guard.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{HostAddr}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: new(int32(port)), Protocol: &proto}},
	}
	_, err = cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publishing the API server's endpoint: %w", err)
	}
	return nil
}

// PlainHTTPRegistry returns the file that lets the node's containerd pull
// from (and resolve tags at) the registry at hostPort over plain HTTP, e.g.
// HostAddr:<port> for a registry on the host's loopback: its hosts.toml
// under containerd's config_path (/etc/containerd/certs.d).
func PlainHTTPRegistry(hostPort string) (path string, f File) {
	return "/etc/containerd/certs.d/" + hostPort + "/hosts.toml", File{Data: fmt.Sprintf(`server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, hostPort)}
}
