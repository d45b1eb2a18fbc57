// One config file's schema check (DESIGN §3): its TOML parsed by toml++ and every table and key
// checked, errors as "FILE:LINE:COLUMN: message" in document order. The one header of the
// config loader whose source includes toml++ (the fuzz build compiles it with its own flags:
// daemon/meson.build engine_toml_sources). Reads no file: text in, settings out.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"

namespace vfiod {

// One file's settings. [daemon] keys stay unset unless the file sets them, so a later file
// overrides only what it says.
struct Fragment {
    std::optional<Mode> mode;
    std::optional<unsigned> write_timeout;
    std::optional<CompanionPolicy> companions;
    std::optional<bool> allow_boot_vga;
    std::vector<DeviceEntry> devices;
    std::vector<ProtectEntry> protects;
    std::vector<SriovEntry> sriovs;
    std::vector<MdevEntry> mdevs;
};

// Adds one file's settings to the merged Config: its [daemon] keys override, its entries append.
void merge_fragment(Fragment&& f, Config& c);

// Parses and checks one document; nullopt when it has errors (appended to errors).
std::optional<Fragment> parse_fragment(std::string_view text, const std::string& name,
                                       std::vector<std::string>& errors);

}  // namespace vfiod
