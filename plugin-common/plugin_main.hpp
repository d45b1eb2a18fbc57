// What both kubelet plugins' main() does the same way (DESIGN §9, §10): one parser for their
// command lines (--help, --version, --verbose and flags that take a value), and one start:
// logging, the signal mask, the plugin's own checks, the per-instance lock, the system bus and
// the Loop, then the plugin itself. Each main() keeps only what is its own: its flags, their
// checks and what it builds on the bus.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

#include "infra/loop.hpp"

namespace vfiod::plugin {

// A plugin's command line, as parse_command_line() reads it.
struct CommandLine {
    const char* program;  // "vfiod-device-plugin": --version says it
    const char* usage;    // what --help prints
    bool* verbose;        // set by --verbose
    // The flags that take a value, and where it goes: {"--root", &options.root}.
    std::vector<std::pair<const char*, std::string*>> values;
    // Tells an argument refused: `what` is "unknown argument '--x'" (`unknown`) or "--root needs
    // a value". Each plugin words its usage error its own way.
    std::function<void(const std::string& what, bool unknown)> refuse;
};

// None to run; otherwise the exit code: 0 after --help or --version, 2 after a refused argument
// (an unknown flag, or a flag with no value or an empty one).
std::optional<int> parse_command_line(int argc, char** argv, const CommandLine& cl);

// A plugin's start, in this order, as run_plugin() performs it.
struct PluginStart {
    const char* program;  // logging's identifier and the instance lock's owner
    bool verbose;
    // After logging and the signal mask, before anything is locked: the plugin's own checks
    // (the API server found, its directories made), and the directory to take the instance
    // lock on, as this process reaches it. None (having logged why) to exit 1.
    std::function<std::optional<std::string>()> prepare;
    // With the lock held and the system bus connected: the plugin, on one Loop; its exit code.
    std::function<int(sdbus::IConnection& bus, Loop& loop)> run;
};

// Logging set up; SIGTERM and SIGINT blocked before any thread starts (gRPC's and the plugin's
// own inherit the mask, and the Loop's signalfd sees them); SIGPIPE ignored; then prepare, the
// instance lock (one plugin per directory: a second one would take over the first one's
// sockets), the bus, and run. 1 when any step before run fails.
int run_plugin(const PluginStart& start);

}  // namespace vfiod::plugin
