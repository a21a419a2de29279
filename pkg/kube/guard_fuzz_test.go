// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzWatchFrames feeds a watch stream of any bytes, in any chunking, to
// the frame limiter: it never panics, refuses exactly the streams with an
// event longer than its limit, and gives back every byte it counted
// against the Guard's total once closed.
func FuzzWatchFrames(f *testing.F) {
	f.Add([]byte("{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n"), false, uint8(3))
	f.Add([]byte{0, 0, 0, 4, 1, 2, 3, 4, 0, 0, 0, 2, 9, 9}, true, uint8(1))
	f.Add([]byte{0x40, 0, 0, 0, 0}, true, uint8(7))
	f.Add(append(bytes.Repeat([]byte("x"), 70), '\n'), false, uint8(15)) // ends inside a read
	f.Fuzz(func(t *testing.T, stream []byte, proto bool, chunk uint8) {
		const limit = 64
		g := &Guard{TotalLimit: 1 << 30}
		b := &frameLimitedBody{ReadCloser: io.NopCloser(bytes.NewReader(stream)), g: g, proto: proto, max: limit, what: "GET /x"}
		buf := make([]byte, int(chunk)%16+1)
		var err error
		for err == nil {
			_, err = b.Read(buf)
		}
		refused := errors.Is(err, ErrResponseTooLarge)
		if refused != tooLongEvent(stream, proto, limit) {
			t.Errorf("refused = %t for %q (proto %t)", refused, stream, proto)
		}
		_ = b.Close()
		if g.open != 0 {
			t.Errorf("%d bytes still counted after Close", g.open)
		}
	})
}

// tooLongEvent is the frame limiter's rule, written plainly.
func tooLongEvent(stream []byte, proto bool, limit int) bool {
	if !proto {
		for _, line := range bytes.Split(stream, []byte("\n")) {
			if len(line) > limit {
				return true
			}
		}
		return false
	}
	for len(stream) >= 4 {
		n := int(stream[0])<<24 | int(stream[1])<<16 | int(stream[2])<<8 | int(stream[3])
		if n > limit {
			return true
		}
		stream = stream[4:]
		if n > len(stream) {
			return false
		}
		stream = stream[n:]
	}
	return false
}
