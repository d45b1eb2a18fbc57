// proc/net/route and proc/net/ipv6_route decide which NICs carry traffic (in-use-network): any
// bytes parse without a crash, and what comes out is a plausible interface name.
#include "fuzz_check.hpp"
#include "io/proc_parsers.hpp"

using namespace vfiod;

namespace {

bool iface_name(const std::string& s) {
    return !s.empty() && s.find_first_of(" \t\r\v\f\n") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    for (const auto& i : parse_route_ifaces(in))
        FUZZ_CHECK(iface_name(i));
    for (const auto& i : parse_ipv6_route_ifaces(in)) {
        FUZZ_CHECK(iface_name(i));
        FUZZ_CHECK(i != "lo");
    }
    return 0;
}
