// SPDX-License-Identifier: Apache-2.0

// Package nodestatustest holds test doubles for pkg/nodestatus: FakeClient,
// an in-memory Node that applies patches the way the API server does. It is
// imported by tests only.
package nodestatustest
