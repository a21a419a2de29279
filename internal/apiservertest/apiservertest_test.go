// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package apiservertest

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t, Options{})
	cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != KubeVersion {
		t.Errorf("server version %s, want %s", v.GitVersion, KubeVersion)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	s.StopAPIServer()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
		t.Fatal("API server answered while stopped")
	}
	if err := s.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
