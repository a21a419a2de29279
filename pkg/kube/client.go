// SPDX-License-Identifier: Apache-2.0

// Package kube is ipvs-guard's client of the Kubernetes API: typed clients
// for the few resources the agent, diagnose and cleanup use (core/v1
// Services, Nodes and ConfigMaps, discovery/v1 EndpointSlices,
// events.k8s.io/v1 Events, and the TokenReviews and SubjectAccessReviews
// that authenticate and authorize a metrics scrape), informers over them,
// and an Event recorder.
//
// client-go's clientset registers every API group's types and typed clients
// at init; a binary that imports it carries all of them (about 14 MiB of
// file-backed memory in every agent). This package builds the same requests
// on client-go's generic typed client (gentype) and a scheme holding only
// the groups above.
package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Reader reads one resource: Get, List and Watch, as client-go's typed
// clients do.
type Reader[T runtime.Object, L runtime.Object] interface {
	// Get reads one object by name.
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	// List lists the objects opts selects.
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	// Watch watches the objects opts selects.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ServiceInterface reads Services.
type ServiceInterface = Reader[*corev1.Service, *corev1.ServiceList]

// EndpointSliceInterface reads EndpointSlices.
type EndpointSliceInterface = Reader[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList]

// ConfigMapInterface reads ConfigMaps.
type ConfigMapInterface = Reader[*corev1.ConfigMap, *corev1.ConfigMapList]

// NodeInterface reads and patches Nodes.
type NodeInterface interface {
	Reader[*corev1.Node, *corev1.NodeList]
	// Patch patches the Node (or its subresources, such as "status").
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// EventInterface writes events.k8s.io/v1 Events.
type EventInterface interface {
	// Create creates an Event.
	Create(ctx context.Context, event *eventsv1.Event, opts metav1.CreateOptions) (*eventsv1.Event, error)
	// Patch patches an Event (a series' count and last observed time).
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*eventsv1.Event, error)
}

// Interface is the part of the Kubernetes API ipvs-guard uses.
type Interface interface {
	// Services reads the Services of namespace ("" for all).
	Services(namespace string) ServiceInterface
	// EndpointSlices reads the EndpointSlices of namespace ("" for all).
	EndpointSlices(namespace string) EndpointSliceInterface
	// ConfigMaps reads the ConfigMaps of namespace.
	ConfigMaps(namespace string) ConfigMapInterface
	// Nodes reads and patches Nodes.
	Nodes() NodeInterface
	// Events writes Events in namespace.
	Events(namespace string) EventInterface
	// ServerResourcesForGroupVersion returns what the API server serves
	// for groupVersion (e.g. "metallb.io/v1beta1"), as discovery does; a
	// group version it does not serve is a NotFound error.
	ServerResourcesForGroupVersion(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// TokenReviewInterface creates TokenReviews: the API server says who a
// bearer token authenticates.
type TokenReviewInterface interface {
	// Create sends the review and returns the API server's answer.
	Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// SubjectAccessReviewInterface creates SubjectAccessReviews: the API server
// says whether a user may do something.
type SubjectAccessReviewInterface interface {
	// Create sends the review and returns the API server's answer.
	Create(ctx context.Context, review *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// ReviewInterface is what authenticating and authorizing a client by the
// API server takes (as kube-rbac-proxy and controller-runtime's secure
// metrics server do).
type ReviewInterface interface {
	// TokenReviews creates TokenReviews.
	TokenReviews() TokenReviewInterface
	// SubjectAccessReviews creates SubjectAccessReviews.
	SubjectAccessReviews() SubjectAccessReviewInterface
}

// NewScheme returns a scheme with only the API groups ipvs-guard reads and
// writes: core/v1, discovery/v1, events.k8s.io/v1, authentication.k8s.io/v1,
// authorization.k8s.io/v1 and the meta types every group version carries
// (options, watch events, status).
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, eventsv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the API scheme: %w", err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s, nil
}

// Clientset is Interface over the API server cfg names.
type Clientset struct {
	core, discovery, events, authn, authz rest.Interface
	params                                runtime.ParameterCodec
}

var (
	_ Interface       = (*Clientset)(nil)
	_ ReviewInterface = (*Clientset)(nil)
)

// NewForConfig returns a Clientset for cfg. Its requests share one HTTP
// client and one rate limiter (cfg.QPS, cfg.Burst), as client-go's
// clientset's do. Set cfg.ContentType to protobuf to speak protobuf; the
// types served here all support it.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("building the HTTP client: %w", err)
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	cs := &Clientset{params: runtime.NewParameterCodec(scheme)}
	for _, g := range []struct {
		into    *rest.Interface
		apiPath string
		gv      schema.GroupVersion
	}{
		{&cs.core, "/api", corev1.SchemeGroupVersion},
		{&cs.discovery, "/apis", discoveryv1.SchemeGroupVersion},
		{&cs.events, "/apis", eventsv1.SchemeGroupVersion},
		{&cs.authn, "/apis", authenticationv1.SchemeGroupVersion},
		{&cs.authz, "/apis", authorizationv1.SchemeGroupVersion},
	} {
		rc, err := restClient(c, httpClient, codecs, g.apiPath, g.gv)
		if err != nil {
			return nil, err
		}
		*g.into = rc
	}
	return cs, nil
}

func restClient(c rest.Config, h *http.Client, codecs runtime.NegotiatedSerializer, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = codecs
	rc, err := rest.RESTClientForConfigAndClient(&c, h)
	if err != nil {
		return nil, fmt.Errorf("building the REST client of %s: %w", gv, err)
	}
	return rc, nil
}

// Services implements Interface.
func (c *Clientset) Services(namespace string) ServiceInterface {
	return gentype.NewClientWithList("services", c.core, c.params, namespace,
		func() *corev1.Service { return &corev1.Service{} },
		func() *corev1.ServiceList { return &corev1.ServiceList{} },
		gentype.PrefersProtobuf[*corev1.Service]())
}

// EndpointSlices implements Interface.
func (c *Clientset) EndpointSlices(namespace string) EndpointSliceInterface {
	return gentype.NewClientWithList("endpointslices", c.discovery, c.params, namespace,
		func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} },
		func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} },
		gentype.PrefersProtobuf[*discoveryv1.EndpointSlice]())
}

// ConfigMaps implements Interface.
func (c *Clientset) ConfigMaps(namespace string) ConfigMapInterface {
	return gentype.NewClientWithList("configmaps", c.core, c.params, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} },
		gentype.PrefersProtobuf[*corev1.ConfigMap]())
}

// Nodes implements Interface.
func (c *Clientset) Nodes() NodeInterface {
	return gentype.NewClientWithList("nodes", c.core, c.params, "",
		func() *corev1.Node { return &corev1.Node{} },
		func() *corev1.NodeList { return &corev1.NodeList{} },
		gentype.PrefersProtobuf[*corev1.Node]())
}

// Events implements Interface.
func (c *Clientset) Events(namespace string) EventInterface {
	return gentype.NewClientWithList("events", c.events, c.params, namespace,
		func() *eventsv1.Event { return &eventsv1.Event{} },
		func() *eventsv1.EventList { return &eventsv1.EventList{} },
		gentype.PrefersProtobuf[*eventsv1.Event]())
}

// TokenReviews implements ReviewInterface.
func (c *Clientset) TokenReviews() TokenReviewInterface {
	return gentype.NewClient("tokenreviews", c.authn, c.params, "",
		func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} },
		gentype.PrefersProtobuf[*authenticationv1.TokenReview]())
}

// SubjectAccessReviews implements ReviewInterface.
func (c *Clientset) SubjectAccessReviews() SubjectAccessReviewInterface {
	return gentype.NewClient("subjectaccessreviews", c.authz, c.params, "",
		func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} },
		gentype.PrefersProtobuf[*authorizationv1.SubjectAccessReview]())
}

// ServerResourcesForGroupVersion implements Interface: GET
// /apis/<groupVersion> in JSON, as client-go's discovery client asks.
func (c *Clientset) ServerResourcesForGroupVersion(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error) {
	path := "/apis/" + groupVersion
	if groupVersion == "v1" {
		path = "/api/v1"
	}
	raw, err := c.core.Get().AbsPath(path).SetHeader("Accept", runtime.ContentTypeJSON).Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", groupVersion, err)
	}
	list := &metav1.APIResourceList{}
	if err := json.Unmarshal(raw, list); err != nil {
		return nil, fmt.Errorf("decoding the resources of %s: %w", groupVersion, err)
	}
	return list, nil
}
