// vfioctl kubevirt: the KubeVirt CR fragment for the allowlist (DESIGN §9) — the permitted
// pciHostDevices and the HostDevices feature gate — as YAML, JSON, or RFC 6902 add operations
// that keep a cluster's existing entries.
#include <cstdio>
#include <set>
#include <utility>

#include "commands.hpp"
#include "core/json.hpp"
#include "host_plan.hpp"
#include "io/topology_reader.hpp"

namespace vfiod::cli {

namespace {

struct Permitted {
    std::string selector;  // "10DE:2331": KubeVirt's pciVendorSelector, upper-case hex
    std::string resource;
};

std::string upper_pair(uint16_t vendor, uint16_t device) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04X:%04X", vendor, device);
    return buf;
}

// KubeVirt matches exact vendor:device pairs. An entry that is not one (a wildcard, or an
// address alone) is expanded to the pairs present on the host, and said so.
std::vector<Permitted> permitted(const Config& config, const Topology& topo) {
    std::vector<Permitted> out;
    std::set<std::pair<std::string, std::string>> seen;
    std::map<std::string, std::string> resource_of;  // selector → first resource
    auto add = [&](const std::string& sel, const DeviceEntry& e) {
        if (!seen.insert({sel, e.resource_name}).second)
            return;
        auto [it, fresh] = resource_of.emplace(sel, e.resource_name);
        if (!fresh)
            std::fprintf(stderr,
                         "vfioctl: warning: %s: %s is also permitted as %s; KubeVirt would count "
                         "the same devices under both names\n",
                         e.origin.str().c_str(), sel.c_str(), it->second.c_str());
        out.push_back({sel, e.resource_name});
    };
    for (const DeviceEntry& e : config.devices) {
        if (e.resource_name.empty())
            continue;
        if (e.selector && e.selector->device) {
            add(upper_pair(e.selector->vendor, *e.selector->device), e);
            continue;
        }
        std::set<std::string> found;
        for (const auto& [a, fn] : topo.functions)
            if (e.matches(a, fn.vendor, fn.device))
                found.insert(upper_pair(fn.vendor, fn.device));
        std::string what = e.selector ? e.selector->str() : "address " + e.address->str();
        if (found.empty()) {
            std::fprintf(stderr,
                         "vfioctl: warning: %s: %s matches no device on this host and KubeVirt "
                         "needs exact vendor:device pairs; it is left out\n",
                         e.origin.str().c_str(), what.c_str());
            continue;
        }
        std::string list;
        for (const auto& s : found)
            list += (list.empty() ? "" : ", ") + s;
        std::fprintf(stderr, "vfioctl: %s: %s expanded from this host to %s\n",
                     e.origin.str().c_str(), what.c_str(), list.c_str());
        for (const auto& s : found)
            add(s, e);
    }
    return out;
}

void write_entry(JsonWriter& w, const Permitted& p, bool external) {
    w.begin_object();
    w.key("pciVendorSelector").value(p.selector);
    w.key("resourceName").value(p.resource);
    if (external)
        w.key("externalResourceProvider").value(true);
    w.end_object();
}

std::string as_json(const std::vector<Permitted>& list, bool external) {
    JsonWriter w;
    w.begin_object().key("spec").begin_object().key("configuration").begin_object();
    w.key("developerConfiguration").begin_object().key("featureGates").begin_array();
    w.value("HostDevices").end_array().end_object();
    w.key("permittedHostDevices").begin_object().key("pciHostDevices").begin_array();
    for (const auto& p : list)
        write_entry(w, p, external);
    w.end_array().end_object();
    w.end_object().end_object().end_object();
    return w.str();
}

// JSON strings are YAML double-quoted scalars, so quoting with json_quote keeps YAML valid
// whatever the bytes.
std::string as_yaml(const std::vector<Permitted>& list, bool external) {
    std::string y =
        "# KubeVirt CR fragment (vfioctl kubevirt): merge into the KubeVirt CR, keeping the\n"
        "# cluster's other pciHostDevices and feature gates.\n"
        "spec:\n"
        "  configuration:\n"
        "    developerConfiguration:\n"
        "      featureGates:\n"
        "        - HostDevices\n"
        "    permittedHostDevices:\n"
        "      pciHostDevices:\n";
    for (const auto& p : list) {
        y += "        - pciVendorSelector: " + json_quote(p.selector) + "\n";
        y += "          resourceName: " + json_quote(p.resource) + "\n";
        if (external)
            y += "          externalResourceProvider: true\n";
    }
    return y;
}

std::string as_json_patch(const std::vector<Permitted>& list, bool external) {
    JsonWriter w;
    w.begin_array();
    w.begin_object();
    w.key("op").value("add");
    w.key("path").value("/spec/configuration/developerConfiguration/featureGates/-");
    w.key("value").value("HostDevices");
    w.end_object();
    for (const auto& p : list) {
        w.begin_object();
        w.key("op").value("add");
        w.key("path").value("/spec/configuration/permittedHostDevices/pciHostDevices/-");
        w.key("value");
        write_entry(w, p, external);
        w.end_object();
    }
    w.end_array();
    return w.str();
}

}  // namespace

int run_kubevirt(const Args& args) {
    std::optional<Config> config = checked_config(args, "nothing was printed");
    if (!config)
        return kExitUsage;
    bool any = false;
    for (const auto& e : config->devices)
        any = any || !e.resource_name.empty();
    if (!any) {
        std::fprintf(stderr,
                     "vfioctl: no [[device]] entry has a resource_name, so KubeVirt has nothing "
                     "to permit. Add one to each entry KubeVirt should schedule, e.g.\n"
                     "  resource_name = \"nvidia.com/GH100_H100_PCIE\"\n");
        for (const auto& e : config->devices)
            std::fprintf(stderr, "vfioctl:   %s: [[device]] %s has none\n", e.origin.str().c_str(),
                         e.selector ? e.selector->str().c_str() : e.address->str().c_str());
        return kExitFailed;
    }
    KernelHostFs fs(args.root);
    std::vector<std::string> warnings;
    // Read only if an entry needs the host: an exact pair never does.
    bool needs_host = false;
    for (const auto& e : config->devices)
        needs_host = needs_host || (!e.resource_name.empty() && !(e.selector && e.selector->device));
    Topology topo = needs_host ? read_topology(fs, &warnings) : Topology{};
    print_lines(warnings, "warning: ");
    std::vector<Permitted> list = permitted(*config, topo);
    if (list.empty()) {
        std::fprintf(stderr, "vfioctl: no entry with a resource_name names a device KubeVirt can "
                             "match on this host (see the warnings above)\n");
        return kExitFailed;
    }
    if (args.json_patch) {
        std::fputs(as_json_patch(list, args.external).c_str(), stdout);
        std::fprintf(stderr,
                     "vfioctl: these operations append to the KubeVirt CR's existing lists "
                     "(kubectl patch kubevirt kubevirt -n kubevirt --type json --patch-file FILE);"
                     " a CR without spec.configuration.permittedHostDevices.pciHostDevices or "
                     "developerConfiguration.featureGates yet needs the fragment merged instead\n");
    } else if (args.json) {
        std::fputs(as_json(list, args.external).c_str(), stdout);
    } else {
        std::fputs(as_yaml(list, args.external).c_str(), stdout);
    }
    return kExitOk;
}

}  // namespace vfiod::cli
