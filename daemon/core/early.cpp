#include "early.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "plan_json.hpp"

namespace vfiod {

namespace {

const DeviceEntry* governing(const Config& config, const FunctionFacts& facts) {
    PciFunction fn;
    static_cast<FunctionFacts&>(fn) = facts;
    return governing_entry(config, fn);
}

std::string refusal_why(const GroupPlan& g) {
    std::string why = std::string("group ") + (g.group ? std::to_string(*g.group) : "none") +
                      " refused (" + to_string(g.reason) + ")";
    for (size_t i = 0; i < g.details.size(); ++i)
        why += (i == 0 ? ": " : "; ") + g.details[i];
    return why;
}

void sort_carried(EarlySet& set) {
    std::sort(set.carried.begin(), set.carried.end(),
              [](const EarlyFunction& a, const EarlyFunction& b) { return a.address < b.address; });
}

}  // namespace

bool has_early_entries(const Config& config) {
    return std::any_of(config.devices.begin(), config.devices.end(),
                       [](const DeviceEntry& e) { return e.early; });
}

EarlySet early_from_plan(const Config& config, const Plan& plan) {
    EarlySet set;
    set.host_checked = true;
    std::set<const DeviceEntry*> used;
    for (const GroupPlan& g : plan.groups) {
        std::vector<std::pair<const PlannedDevice*, const DeviceEntry*>> early;
        for (const PlannedDevice& d : g.devices)
            if (d.role == Role::Allowlisted)
                if (const DeviceEntry* e = governing(config, d); e && e->early)
                    early.emplace_back(&d, e);
        if (early.empty())
            continue;
        for (const auto& [d, e] : early)
            used.insert(e);
        if (config.mode == Mode::Observe)
            continue;
        if (g.action != Action::Bind && g.action != Action::Bound) {
            for (const auto& [d, e] : early)
                set.left_out.push_back({d->address, e->origin.str(), refusal_why(g)});
            continue;
        }
        // The whole group: the daemon binds it all the same, and a companion left to its host
        // driver here would be moved later, which is what early binding exists to avoid.
        const std::string origin = early.front().second->origin.str();
        for (const PlannedDevice& d : g.devices)
            if (d.role != Role::Bridge && d.target)
                set.carried.push_back({d.address, d.vendor, d.device, *d.target, origin});
    }
    for (const DeviceEntry& e : config.devices) {
        if (!e.early)
            continue;
        if (config.mode == Mode::Observe)
            set.left_out.push_back({std::nullopt, e.origin.str(),
                                    "mode = \"observe\": vfiod writes nothing"});
        else if (!used.count(&e))
            set.left_out.push_back(
                {std::nullopt, e.origin.str(), "governs no PCI function on this host"});
    }
    sort_carried(set);
    return set;
}

EarlySet early_from_config(const Config& config) {
    EarlySet set;
    for (const DeviceEntry& e : config.devices) {
        if (!e.early)
            continue;
        std::string why;
        if (config.mode == Mode::Observe)
            why = "mode = \"observe\": vfiod writes nothing";
        else if (!e.address)
            why = "no address: an image build cannot tell which of the devices of " +
                  (e.selector ? e.selector->str() : std::string("this ID")) + " are the host's own";
        else if (!e.selector || !e.selector->device)
            why = "no vendor:device selector: the initramfs matches by address and ID";
        if (!why.empty()) {
            set.left_out.push_back({e.address, e.origin.str(), why});
            continue;
        }
        auto taken = std::find_if(set.carried.begin(), set.carried.end(),
                                  [&](const EarlyFunction& f) { return f.address == *e.address; });
        if (taken != set.carried.end()) {
            set.left_out.push_back({e.address, e.origin.str(), "an earlier entry has it"});
            continue;
        }
        set.carried.push_back({*e.address, e.selector->vendor, *e.selector->device, e.driver,
                               e.origin.str()});
    }
    sort_carried(set);
    return set;
}

std::string early_list_text(const EarlySet& set, const std::string& kernel) {
    std::string out = "# vfiod early binding for " + kernel +
                      ": ADDRESS VENDOR DEVICE DRIVER (vfioctl initramfs)\n";
    for (const EarlyFunction& f : set.carried)
        out += f.address.str() + ' ' + hex4(f.vendor) + ' ' + hex4(f.device) + ' ' + f.driver +
               '\n';
    return out;
}

std::string early_config_digest(const Config& config) {
    std::string key = std::string(to_string(config.mode)) + '|' + to_string(config.companions) +
                      '|' + (config.allow_boot_vga ? "vga" : "") + '\n';
    auto match = [](const auto& e) {
        return (e.selector ? e.selector->str() : "") + '@' + (e.address ? e.address->str() : "");
    };
    for (const DeviceEntry& e : config.devices)
        key += "d " + match(e) + ' ' + e.driver + (e.early ? " early\n" : "\n");
    for (const ProtectEntry& p : config.protects)
        key += "p " + match(p) + '\n';
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : key)
        h = (h ^ c) * 1099511628211ull;
    char out[32];
    std::snprintf(out, sizeof out, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
    return out;
}

}  // namespace vfiod
