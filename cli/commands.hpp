// vfioctl's verbs: one function per verb, each in its own cmd_*.cpp; main.cpp parses arguments
// and dispatches. Exit codes are part of the interface (see `vfioctl --help`).
#pragma once

#include <optional>
#include <string>

#include "dbus_client.hpp"

namespace vfiod::cli {

enum ExitCode : int {
    kExitOk = 0,           // done; for apply: every bind/bound group ended bound
    kExitFailed = 1,       // the operation failed or was refused
    kExitUsage = 2,        // bad arguments or a bad configuration
    kExitUnavailable = 3,  // the daemon is not reachable on the system bus
    kExitDenied = 4,       // not permitted (not root / AccessDenied)
};

// A D-Bus client outcome as vfioctl's exit code.
int exit_code(const client::ClientResult& r);

// The options every verb understands; each verb uses what applies to it.
struct Args {
    std::string root = "/";               // --root DIR
    std::optional<std::string> config;    // --config FILE
    bool json = false;                    // --json
    bool offline = false;                 // --offline (status)
    bool yaml = false;                    // --yaml (kubevirt; its default)
    bool external = false;                // --external (kubevirt)
    bool json_patch = false;              // --json-patch (kubevirt)
    std::optional<std::string> kubevirt_cr;  // --kubevirt-cr FILE (doctor)
    std::optional<std::string> kernel;    // --kernel VERSION (initramfs)
    std::optional<std::string> output;    // --output FILE (initramfs)
    bool image = false;                   // --image (initramfs)
    std::string operand;                  // ADDR for bind/release, FILE for check-config
};

int run_plan(const Args& args);
int run_check_config(const Args& args);
int run_apply(const Args& args);   // executes the plan once, without the daemon (root)
int run_status(const Args& args);   // D-Bus client (daemon); --offline reads the host
int run_bind(const Args& args);     // D-Bus client: Bind(operand)
int run_release(const Args& args);  // D-Bus client: Release(operand)
int run_doctor(const Args& args);
int run_kubevirt(const Args& args);  // the KubeVirt CR fragment for the allowlist
int run_initramfs(const Args& args);  // what an initramfs carries for early binding (DESIGN §14)

}  // namespace vfiod::cli
