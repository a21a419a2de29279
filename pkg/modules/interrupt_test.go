// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// stuckKernel is a fakeKernel whose insertion of one module never returns
// until released, whatever the context says (a finit_module stuck in a
// module's init function).
type stuckKernel struct {
	fakeKernel
	module  string
	entered chan struct{}
	release chan struct{}
}

func (k *stuckKernel) FinitModule(fd int, params string, flags int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	if string(bytes.TrimPrefix(b, []byte("\x7fELF"))) == k.module {
		close(k.entered)
		<-k.release
	}
	return k.fakeKernel.FinitModule(fd, params, flags)
}

// TestRemediationInterruptedKeepsActions: a modules remediation interrupted
// while it loads modules (SIGTERM, the agent's check timeout) reports the
// declaration file it wrote and every module it inserted before, through
// the error check.Bound returns; and the file holds the new content.
func TestRemediationInterruptedKeepsActions(t *testing.T) {
	dir := moduleTree(t, "debian12", debRel, nil)
	k := &stuckKernel{module: "ip_vs", entered: make(chan struct{}), release: make(chan struct{})}
	l, err := newLoader(hostfs.New(dir), debRel, k)
	must(t, err)
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: l})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	finished := make(chan struct{})
	b := check.Bound(check.Func{CheckName: c.Name(), Fn: func(ctx context.Context) (check.Result, error) {
		defer close(finished)
		return c.Run(ctx)
	}})
	t.Cleanup(func() {
		close(k.release)
		<-finished // the abandoned run reads the tree until it returns
	})
	go func() {
		select {
		case <-k.entered:
		case <-time.After(30 * time.Second):
		}
		cancel()
	}()
	_, err = b.Run(ctx)
	select {
	case <-k.entered:
	default:
		t.Fatalf("the run ended before loading ip_vs: %v", err)
	}
	res := check.Errored(c.Name(), err)

	want := []string{"wrote /etc/modules-load.d/ipvs.conf: declared ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack"}
	for _, call := range k.calls { // inserted before ip_vs got stuck
		want = append(want, "loaded "+strings.Split(call, ":")[1])
	}
	if len(want) < 2 {
		t.Fatalf("nothing was inserted before ip_vs: %q", k.calls)
	}
	if diff := cmp.Diff(want, res.Actions); diff != "" {
		t.Errorf("actions of the interrupted run (-want +got):\n%s", diff)
	}
	if !strings.Contains(res.Message, "interrupted (context canceled) after: "+strings.Join(want, "; ")) {
		t.Errorf("message does not say what was done: %s", res.Message)
	}
	got, err := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
	must(t, err)
	if !bytes.Contains(got, []byte("\nip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\n")) && !bytes.HasPrefix(got, []byte("ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\n")) {
		t.Errorf("declaration file on disk:\n%s", got)
	}
}
