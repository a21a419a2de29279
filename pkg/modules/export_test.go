// SPDX-License-Identifier: Apache-2.0

package modules

// CopyTree lets the external test package copy a testdata tree the same way.
var CopyTree = copyTree
