// vfioctl kubevirt: the KubeVirt CR fragment for the allowlist (DESIGN §9) — the permitted
// pciHostDevices and the HostDevices feature gate — and for the [[mdev]] entries (DESIGN §12)
// the external mediatedDevices and the gate that turns KubeVirt's own mdev handling off, as
// YAML, JSON, or RFC 6902 add operations that keep a cluster's existing entries.
#include <cstdio>
#include <set>
#include <utility>

#include "commands.hpp"
#include "core/json.hpp"
#include "doctor.hpp"
#include "host_plan.hpp"
#include "io/mdev_reader.hpp"
#include "io/topology_reader.hpp"

namespace vfiod::cli {

namespace {

struct Permitted {
    // "10DE:2331": KubeVirt's pciVendorSelector, upper-case hex; for an mdev type, its
    // mdevNameSelector: the type's name file, else its directory's name
    std::string selector;
    std::string resource;
};

// What the fragment permits: PCI functions, and the mdev types vfiod makes (always external:
// vfiod and its plugins serve them, and virt-handler keeps an external type's mdevs).
struct Fragment {
    std::vector<Permitted> pci;
    std::vector<Permitted> mdevs;
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

// One entry per (type name, resource) of the pairs the [[mdev]] entries reach on this host, in
// the plan's order: the plan is what names a pair's type (its name file, else its directory, as
// for a parent this host lacks). Several types under one resource_name are one entry each.
std::vector<Permitted> permitted_mdevs(const Config& config, const Topology& topo,
                                       const MdevHost& host) {
    Plan plan;
    plan.mdevs = plan_mdevs(host, topo, HostUse{}, config);
    std::vector<Permitted> out;
    std::set<std::pair<std::string, std::string>> seen;
    for (const MdevFinding& f : mdev_findings(host, topo, config, plan).value_or(
             std::vector<MdevFinding>{}))
        if (!f.resource_name.empty() && seen.insert({f.type_name, f.resource_name}).second)
            out.push_back({f.type_name, f.resource_name});
    return out;
}

// The feature gates: HostDevices for PCI functions, and the gate that keeps virt-handler from
// creating and removing mdevs itself.
std::vector<const char*> gates(const Fragment& f) {
    std::vector<const char*> out;
    if (!f.pci.empty())
        out.push_back("HostDevices");
    if (!f.mdevs.empty())
        out.push_back(kDisableMdevGate);
    return out;
}

void write_entry(JsonWriter& w, const Permitted& p, bool external, const char* selector_key) {
    w.begin_object();
    w.key(selector_key).value(p.selector);
    w.key("resourceName").value(p.resource);
    if (external)
        w.key("externalResourceProvider").value(true);
    w.end_object();
}

std::string as_json(const Fragment& f, bool external) {
    JsonWriter w;
    w.begin_object().key("spec").begin_object().key("configuration").begin_object();
    w.key("developerConfiguration").begin_object().key("featureGates").begin_array();
    for (const char* g : gates(f))
        w.value(g);
    w.end_array().end_object();
    w.key("permittedHostDevices").begin_object();
    if (!f.pci.empty()) {
        w.key("pciHostDevices").begin_array();
        for (const auto& p : f.pci)
            write_entry(w, p, external, "pciVendorSelector");
        w.end_array();
    }
    if (!f.mdevs.empty()) {
        w.key("mediatedDevices").begin_array();
        for (const auto& p : f.mdevs)
            write_entry(w, p, true, "mdevNameSelector");
        w.end_array();
    }
    w.end_object();
    w.end_object().end_object().end_object();
    return w.str();
}

// JSON strings are YAML double-quoted scalars, so quoting with json_quote keeps YAML valid
// whatever the bytes.
std::string yaml_entries(const char* list, const char* selector_key,
                         const std::vector<Permitted>& entries, bool external) {
    std::string y = std::string("      ") + list + ":\n";
    for (const auto& p : entries) {
        y += std::string("        - ") + selector_key + ": " + json_quote(p.selector) + "\n";
        y += "          resourceName: " + json_quote(p.resource) + "\n";
        if (external)
            y += "          externalResourceProvider: true\n";
    }
    return y;
}

std::string as_yaml(const Fragment& f, bool external) {
    std::string y =
        "# KubeVirt CR fragment (vfioctl kubevirt): merge into the KubeVirt CR, keeping the\n"
        "# cluster's other pciHostDevices and feature gates.\n";
    if (!f.mdevs.empty())
        y += "# The mediatedDevices are vfiod's mdev types: external, so virt-handler keeps their\n"
             "# mdevs; DisableMDEVConfiguration stops it creating and removing mdevs itself.\n";
    y += "spec:\n"
         "  configuration:\n"
         "    developerConfiguration:\n"
         "      featureGates:\n";
    for (const char* g : gates(f))
        y += std::string("        - ") + g + "\n";
    y += "    permittedHostDevices:\n";
    if (!f.pci.empty())
        y += yaml_entries("pciHostDevices", "pciVendorSelector", f.pci, external);
    if (!f.mdevs.empty())
        y += yaml_entries("mediatedDevices", "mdevNameSelector", f.mdevs, true);
    return y;
}

void add_op(JsonWriter& w, const char* path) {
    w.begin_object();
    w.key("op").value("add");
    w.key("path").value(path);
    w.key("value");
}

std::string as_json_patch(const Fragment& f, bool external) {
    JsonWriter w;
    w.begin_array();
    for (const char* g : gates(f)) {
        add_op(w, "/spec/configuration/developerConfiguration/featureGates/-");
        w.value(g).end_object();
    }
    for (const auto& p : f.pci) {
        add_op(w, "/spec/configuration/permittedHostDevices/pciHostDevices/-");
        write_entry(w, p, external, "pciVendorSelector");
        w.end_object();
    }
    for (const auto& p : f.mdevs) {
        add_op(w, "/spec/configuration/permittedHostDevices/mediatedDevices/-");
        write_entry(w, p, true, "mdevNameSelector");
        w.end_object();
    }
    w.end_array();
    return w.str();
}

// The precondition of --json-patch: "-" appends to a list that must exist.
void print_patch_note(const Fragment& f) {
    std::string lists;
    if (!f.pci.empty())
        lists = "spec.configuration.permittedHostDevices.pciHostDevices";
    if (!f.mdevs.empty())
        lists += std::string(lists.empty() ? "" : ", ") +
                 "spec.configuration.permittedHostDevices.mediatedDevices";
    std::fprintf(stderr,
                 "vfioctl: these operations append to the KubeVirt CR's existing lists "
                 "(kubectl patch kubevirt kubevirt -n kubevirt --type json --patch-file FILE);"
                 " a CR without %s or developerConfiguration.featureGates yet needs the fragment "
                 "merged instead\n",
                 lists.c_str());
}

}  // namespace

int run_kubevirt(const Args& args) {
    std::optional<Config> config = checked_config(args, "nothing was printed");
    if (!config)
        return kExitUsage;
    bool any = !config->mdevs.empty();  // an [[mdev]] entry always has a resource name
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
    // Read only if an entry needs the host: an exact pair never does; an [[mdev]] entry's type
    // name is its parent's, and a selector finds its parents among the PCI functions.
    bool needs_host = false;
    for (const auto& e : config->devices)
        needs_host = needs_host || (!e.resource_name.empty() && !(e.selector && e.selector->device));
    for (const auto& e : config->mdevs)
        needs_host = needs_host || e.selector;
    Topology topo = needs_host ? read_topology(fs, &warnings) : Topology{};
    MdevHost mdevs = config->mdevs.empty() ? MdevHost{} : read_mdev_host(fs, &warnings);
    print_lines(warnings, "warning: ");
    Fragment f{permitted(*config, topo), permitted_mdevs(*config, topo, mdevs)};
    if (f.pci.empty() && f.mdevs.empty()) {
        std::fprintf(stderr, "vfioctl: no entry with a resource_name names a device KubeVirt can "
                             "match on this host (see the warnings above)\n");
        return kExitFailed;
    }
    if (args.json_patch) {
        std::fputs(as_json_patch(f, args.external).c_str(), stdout);
        print_patch_note(f);
    } else if (args.json) {
        std::fputs(as_json(f, args.external).c_str(), stdout);
    } else {
        std::fputs(as_yaml(f, args.external).c_str(), stdout);
    }
    if (!f.mdevs.empty())
        std::fprintf(stderr,
                     "vfioctl: %s turns virt-handler's own mdev creation and removal off "
                     "(KubeVirt v1.0 to v1.9; deprecated since v1.8, where "
                     "spec.configuration.mediatedDevicesConfiguration.enabled: false does the "
                     "same and, when set to either value, wins over the gate)\n",
                     kDisableMdevGate);
    return kExitOk;
}

}  // namespace vfiod::cli
