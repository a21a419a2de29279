// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package nftdrift

import "errors"

// Reader reads kube-proxy's nftables tables (Linux only).
type Reader struct {
	// NetNS is the network namespace to read.
	NetNS string
	// NoFeed reads without nf_tables' change feed.
	NoFeed bool
}

// ReaderStats counts a Reader's work (Linux only).
type ReaderStats struct {
	Reads, Unchanged, Full, Followed, ChainDumps, MapDumps, MapsCached, Retries, Overflows int
	Feed                                                                                   bool
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
