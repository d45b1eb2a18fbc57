// PciAddress::parse guards every path built from an address (DESIGN §2): it may accept only the
// canonical spelling, so nothing it accepts can carry '/' or '..' into a sysfs path.
#include <string>

#include "core/pci_address.hpp"
#include "fuzz_check.hpp"

using vfiod::PciAddress;
using vfiod::fuzz::printable;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    std::string err;
    if (auto a = PciAddress::parse(in, &err)) {
        FUZZ_CHECK(a->str() == in);
        FUZZ_CHECK(in.find('/') == std::string_view::npos);
        FUZZ_CHECK(in.find("..") == std::string_view::npos);
        FUZZ_CHECK(a->slot <= 0x1f && a->function <= 7);
        FUZZ_CHECK(*PciAddress::parse(a->str()) == *a);
        const std::string elem = a->object_path_element();
        FUZZ_CHECK(elem.find_first_not_of("0123456789abcdef_") == std::string::npos);
    } else {
        // The reason quotes the input, so it must be escaped and bounded.
        FUZZ_CHECK(!err.empty());
        FUZZ_CHECK(printable(err));
        FUZZ_CHECK(err.size() < 512);
    }

    // The other direction: every address the kernel can print parses back to itself.
    if (size >= 7) {
        PciAddress a;
        a.domain = uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 |
                   uint32_t(data[3]) << 24;
        a.bus = data[4];
        a.slot = data[5] & 0x1f;
        a.function = data[6] & 7;
        auto back = PciAddress::parse(a.str());
        FUZZ_CHECK(back && *back == a);
    }
    return 0;
}
