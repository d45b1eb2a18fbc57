// vfiod's command line: the options, their parsing and the --help text. Shared by vfiod
// (daemon/main.cpp) and its fake-kernel test build (tests/support/fake_kernel_main.cpp), so
// both take the same flags and say the same things.
#pragma once

#include <optional>
#include <string>

#include "service/service.hpp"

namespace vfiod {

struct DaemonOptions {
    std::string root = "/";
    ServiceOptions service;
    bool verbose = false;
    std::optional<std::string> udev_match;
};

// Parses argv into *options. Nothing: run the daemon. Otherwise the exit code to leave with at
// once: 0 after --help or --version (printed on stdout), 2 after a bad argument (said on stderr).
std::optional<int> parse_options(int argc, char** argv, DaemonOptions* options);

}  // namespace vfiod
