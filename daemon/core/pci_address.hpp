// PCI function addresses (DDDD:BB:SS.F): the one validator every address from config, CLI or D-Bus
// passes before it is allowed near a path.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vfiod {

struct PciAddress {
    uint32_t domain = 0;
    uint8_t bus = 0;
    uint8_t slot = 0;
    uint8_t function = 0;

    // Accepts exactly the canonical form "%04x:%02x:%02x.%x" (domain may be longer than four hex
    // digits, for VMD domains). Anything that does not re-format to the same bytes is rejected,
    // with the reason in *err.
    static std::optional<PciAddress> parse(std::string_view text, std::string* err = nullptr);

    std::string str() const;
    // "0000_01_00_0": the form used in D-Bus object paths.
    std::string object_path_element() const;

    auto operator<=>(const PciAddress&) const = default;
};

}  // namespace vfiod
