// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"reflect"
	"testing"
)

func TestMACsMemo(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		has    bool
		want   map[string]string
		wantOK bool
	}{
		{name: "published", raw: `{"eth0":"02:00:00:00:00:0a"}`, has: true, want: map[string]string{"eth0": "02:00:00:00:00:0a"}, wantOK: true},
		{name: "empty object", raw: `{}`, has: true, want: map[string]string{}, wantOK: true},
		{name: "null, as DecodeMACs accepts it", raw: `null`, has: true, wantOK: true},
		{name: "malformed", raw: `{"eth0":`, has: true},
		{name: "no annotation", has: false},
	}
	var m macsMemo
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second answer comes from the memo
				got, ok := m.decode(tt.raw, tt.has)
				if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
					t.Errorf("decode(%q, %v) = %v, %v; want %v, %v", tt.raw, tt.has, got, ok, tt.want, tt.wantOK)
				}
			}
		})
	}
	a, _ := m.decode(`{"eth0":"02:00:00:00:00:0a"}`, true)
	b, _ := m.decode(`{"eth0":"02:00:00:00:00:0a"}`, true)
	if reflect.ValueOf(a).Pointer() != reflect.ValueOf(b).Pointer() {
		t.Error("the same value was decoded twice")
	}
	for i := range 2 * maxDecodedMACs {
		m.decode(fmt.Sprintf(`{"eth%d":"02:00:00:00:00:0a"}`, i), true)
	}
	if n := len(m.decoded); n > maxDecodedMACs {
		t.Errorf("memo holds %d values, want at most %d", n, maxDecodedMACs)
	}
}
