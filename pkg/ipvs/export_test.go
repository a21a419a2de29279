// SPDX-License-Identifier: Apache-2.0

package ipvs

// WithoutProcFS makes a Handle read every real server through netlink.
var WithoutProcFS = withoutProcFS

// ParseProcIPVS parses the text of /proc/net/ip_vs into real servers by
// virtual server.
func ParseProcIPVS(data []byte) (map[Key][]RealServer, error) { return parseProcIPVS(data) }
