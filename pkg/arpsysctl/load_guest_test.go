// SPDX-License-Identifier: Apache-2.0

//go:build guest

package arpsysctl_test

import (
	"context"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

func loadNative(t *testing.T, names ...string) {
	t.Helper()
	l, err := modules.NewNativeLoader(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), names); err != nil {
		t.Fatalf("loading %v: %v", names, err)
	}
	guest.RequireLoaded(t, names...)
}
