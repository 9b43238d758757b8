package egress

import (
	"fmt"
	"net/netip"
	"slices"
)

// special are the ranges the proxy refuses unless an endpoint's
// allowed_ips lists the address, besides what netip's predicates name
// (loopback, private, link-local, multicast, unspecified).
var special = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a 'this network' address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
}

// embedded are the IPv6 ranges that carry an IPv4 address (NAT64 and
// 6to4), with where the IPv4 address starts: it is checked too.
var embedded = []struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},
	{netip.MustParsePrefix("64:ff9b:1::/48"), 12},
	{netip.MustParsePrefix("2002::/16"), 2},
}

// CheckAddr says whether the proxy may connect to a: nil, or why not.
// Loopback, link-local (169.254.169.254, the metadata address, included),
// private (RFC 1918, fc00::/7), carrier-grade NAT, unspecified, multicast
// and other special addresses, those same addresses written as
// IPv4-mapped, NAT64 or 6to4 IPv6, and the deny addresses (the gateway's
// own) are refused unless allowed contains the address.
func CheckAddr(a netip.Addr, allowed []netip.Prefix, deny []netip.Addr) error {
	if !a.IsValid() {
		return fmt.Errorf("no address")
	}
	a = a.WithZone("").Unmap()
	for _, p := range allowed {
		if p.Contains(a) {
			return nil
		}
	}
	if slices.ContainsFunc(deny, func(d netip.Addr) bool { return d.WithZone("").Unmap() == a }) {
		return fmt.Errorf("%s is one of the gateway's own addresses (not in the endpoint's allowed_ips)", a)
	}
	if what := specialKind(a); what != "" {
		return fmt.Errorf("%s is %s (not in the endpoint's allowed_ips)", a, what)
	}
	for _, e := range embedded {
		if e.prefix.Contains(a) {
			b := a.As16()
			v4 := netip.AddrFrom4([4]byte(b[e.at : e.at+4]))
			if what := specialKind(v4); what != "" || slices.Contains(deny, v4) {
				return fmt.Errorf("%s carries %s, a refused address (not in the endpoint's allowed_ips)", a, v4)
			}
		}
	}
	return nil
}

// specialKind names what kind of refused address a is, or "".
func specialKind(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "a loopback address"
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		return "the cloud metadata address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsPrivate():
		return "a private address"
	case a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case a.Is6() && a.As16()[0] == 0 && netip.PrefixFrom(netip.IPv6Unspecified(), 96).Contains(a):
		return "an IPv4-compatible address"
	}
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.what
		}
	}
	return ""
}
