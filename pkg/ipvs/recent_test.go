// SPDX-License-Identifier: Apache-2.0

package ipvs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs/ipvstest"
)

func TestRecentWithin(t *testing.T) {
	fake := ipvstest.NewFake(ipvs.Table{{Virtual: ipvs.VirtualServer{Port: 80}}})
	r := ipvs.NewRecent(fake)
	w := r.Within(time.Hour)
	tests := []struct {
		name      string
		read      ipvs.Interface
		inject    error
		wantCalls int
		wantErr   bool
	}{
		{name: "nothing remembered: reads", read: w, wantCalls: 1},
		{name: "remembered: served", read: w, wantCalls: 1},
		{name: "the first reader always reads", read: r, wantCalls: 2},
		{name: "a failed read is not remembered", read: r, inject: errors.New("netlink"), wantCalls: 3, wantErr: true},
		{name: "the last good table is still served", read: w, wantCalls: 3},
		{name: "too old: reads", read: r.Within(0), wantCalls: 4},
	}
	for _, tt := range tests {
		fake.InjectError(tt.inject)
		_, err := tt.read.Table(context.Background())
		if (err != nil) != tt.wantErr || fake.Calls() != tt.wantCalls {
			t.Errorf("%s: err %v, %d kernel reads; want error %v, %d reads", tt.name, err, fake.Calls(), tt.wantErr, tt.wantCalls)
		}
	}
}
