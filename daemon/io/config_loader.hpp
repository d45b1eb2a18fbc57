// Reads and validates vfiod.toml (+ conf.d) into a Config, with FILE:LINE:COLUMN messages (DESIGN §3).
// The steps live apart: io/config_files reads the files (through HostFs under the root),
// core/toml_prescan refuses a document too deep for toml++, io/config_schema parses and checks
// each file (the only toml++ source), core/config_checks checks the merged Config
// (resource-name collisions, overlapping entries).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"

namespace vfiod {

class HostFs;

struct ConfigResult {
    std::optional<Config> config;        // set only when errors is empty
    std::vector<std::string> errors;     // "FILE:LINE:COLUMN: message"
    std::vector<std::string> warnings;   // "FILE:LINE:COLUMN: message" (or "FILE: message")
};

// One TOML document, no conf.d. `name` is the file name used in messages and Origins.
ConfigResult parse_config(std::string_view text, const std::string& name);

// DESIGN §3: with no file, etc/vfiod/vfiod.toml then etc/vfiod/conf.d/*.toml in lexical order,
// read under host's root through it (links stay inside the root; a FIFO or an oversized file is
// an error naming it); with a file, that file then the conf.d/ directory beside it, plain paths
// (DESIGN §2). Merged.
ConfigResult load_config(const HostFs& host, const std::optional<std::string>& file);
// The same with a KernelHostFs over root, opened only when there is no file.
ConfigResult load_config(const std::string& root, const std::optional<std::string>& file);

}  // namespace vfiod
