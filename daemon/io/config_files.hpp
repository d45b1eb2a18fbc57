// The config loader's file access: one config file read whole (capped at 1 MiB) and the
// conf.d/*.toml names of a directory, with the reasons it reports when it cannot. Plain paths:
// the loader builds them from --root or takes --config FILE as given (DESIGN §2, §3).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace vfiod {

enum class ReadStatus { Ok, Missing, Failed };

// The file's bytes into *text; when Failed, *why says why ("cannot read: ...", "larger than
// 1 MiB; refusing to read it").
ReadStatus read_config_file(const std::filesystem::path& p, std::string* text, std::string* why);

// conf.d/*.toml in byte order of the names; a missing directory is simply empty.
std::vector<std::filesystem::path> list_confd(const std::filesystem::path& dir,
                                              std::vector<std::string>& errors);

}  // namespace vfiod
