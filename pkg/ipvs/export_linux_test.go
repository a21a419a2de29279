// SPDX-License-Identifier: Apache-2.0

package ipvs

import "context"

// RealServersFromProcFS reads real servers the way Table does from the
// kernel's file; nil when the Handle would fall back to netlink.
func (h *Handle) RealServersFromProcFS(ctx context.Context) map[Key][]RealServer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readProcLocked(ctx)
}
