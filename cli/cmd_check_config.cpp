// vfioctl check-config FILE: validate a configuration without touching the host.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "core/json.hpp"
#include "io/config_loader.hpp"

namespace vfiod::cli {

int run_check_config(const Args& args) {
    ConfigResult cr = load_config("/", args.operand);
    if (args.json) {
        JsonWriter w;
        w.begin_object();
        w.key("valid").value(cr.config.has_value());
        w.key("errors").begin_array();
        for (const auto& e : cr.errors)
            w.value(e);
        w.end_array();
        w.key("warnings").begin_array();
        for (const auto& e : cr.warnings)
            w.value(e);
        w.end_array();
        w.key("files").begin_array();
        if (cr.config)
            for (const auto& f : cr.config->files)
                w.value(f);
        w.end_array();
        w.end_object();
        std::fputs(w.str().c_str(), stdout);
        return cr.config ? kExitOk : kExitUsage;
    }
    for (const auto& e : cr.errors)
        std::fprintf(stderr, "%s\n", e.c_str());
    for (const auto& e : cr.warnings)
        std::fprintf(stderr, "warning: %s\n", e.c_str());
    if (!cr.config) {
        std::fprintf(stderr, "%s: invalid (%zu error%s)\n", args.operand.c_str(), cr.errors.size(),
                     cr.errors.size() == 1 ? "" : "s");
        return kExitUsage;
    }
    const Config& c = *cr.config;
    // [[sriov]] entries are named only when there are some: the summary of every other config
    // reads as it always has.
    std::string sriov;
    if (!c.sriovs.empty())
        sriov = ", " + std::to_string(c.sriovs.size()) + " sriov entr" +
                (c.sriovs.size() == 1 ? "y" : "ies");
    std::printf("%s: valid: mode %s, companions %s, %zu device entr%s, %zu protect entr%s%s "
                "(%zu file%s read)\n",
                args.operand.c_str(), to_string(c.mode), to_string(c.companions),
                c.devices.size(), c.devices.size() == 1 ? "y" : "ies", c.protects.size(),
                c.protects.size() == 1 ? "y" : "ies", sriov.c_str(), c.files.size(),
                c.files.size() == 1 ? "" : "s");
    return kExitOk;
}

}  // namespace vfiod::cli
