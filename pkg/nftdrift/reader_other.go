// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package nftdrift

import "errors"

// Reader reads kube-proxy's nftables tables (Linux only).
type Reader struct {
	// NetNS is the network namespace to read.
	NetNS string
}

// ReaderStats counts a Reader's work (Linux only).
type ReaderStats struct {
	Reads, Unchanged, MapDumps, MapsCached, Retries int
}

// Stats returns nothing: nftables is Linux only.
func (*Reader) Stats() ReaderStats { return ReaderStats{} }

// Read reports that nftables is Linux only.
func (*Reader) Read() ([]Table, error) {
	return nil, errors.New("nftables: not supported on this platform")
}

// ReadIPTables reports that nftables is Linux only.
func (*Reader) ReadIPTables() ([]IPTablesFamily, error) {
	return nil, errors.New("nftables: not supported on this platform")
}
