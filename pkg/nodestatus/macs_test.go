// SPDX-License-Identifier: Apache-2.0

package nodestatus_test

import (
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

func TestMACsRoundTrip(t *testing.T) {
	enc := nodestatus.EncodeMACs(map[string]string{"eth1": "02:00:00:00:00:0B", "eth0": "02:00:00:00:00:0a"})
	if enc != `{"eth0":"02:00:00:00:00:0a","eth1":"02:00:00:00:00:0b"}` {
		t.Errorf("EncodeMACs = %s", enc)
	}
	if _, err := nodestatus.DecodeMACs("{"); err == nil {
		t.Error("DecodeMACs accepted malformed input")
	}
}
