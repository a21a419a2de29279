// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMessageIgnoresServiceChurn: kube-proxy binds every Service IP to
// kube-ipvs0 on every node, so a message that counted them would turn one
// Service change into a Node write on every node.
func TestMessageIgnoresServiceChurn(t *testing.T) {
	addr := strings.TrimPrefix(fakeKubeProxy(t, "ipvs", "testdata/configz-ipvs-lc.json").URL, "http://")
	var msgs []string
	for _, n := range []int{1, 2, 250} {
		var ips []string
		for i := range n {
			ips = append(ips, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1))
		}
		c, err := NewChecker(CheckerConfig{Client: NewClient(addr, time.Second), ReadLink: links(true, ips...)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != ReasonIPVSMode {
			t.Fatalf("%d addresses: %s/%s %s", n, res.Status, res.Reason, res.Message)
		}
		if got := res.Findings[0].String(); !strings.Contains(got, fmt.Sprintf("%d address(es)", n)) {
			t.Errorf("finding %q does not count %d addresses (diagnose shows it)", got, n)
		}
		msgs = append(msgs, res.Message)
	}
	for _, m := range msgs[1:] {
		if diff := cmp.Diff(msgs[0], m); diff != "" {
			t.Errorf("message changes with the Service count (-1 address +more):\n%s", diff)
		}
	}
}
