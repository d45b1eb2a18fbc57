#include "config_checks.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "resource_names.hpp"
#include "strings.hpp"

namespace vfiod {

std::string config_quote(std::string_view s) { return '"' + printable(s) + '"'; }

namespace {

// The index of warn_overlaps (config_checks.hpp) over one kind of entry: [[device]] or [[sriov]].
template <typename Entry>
void overlaps_of(const std::vector<Entry>& entries, const std::string& table,
                 std::vector<std::string>& warnings) {
    struct Seen {
        size_t first;
        size_t count;
    };
    std::map<std::string, Seen> index;
    BoundedWarnings out(&warnings, "overlapping " + table + " entries");
    for (size_t j = 0; j < entries.size(); ++j) {
        const Entry& e = entries[j];
        const std::string addr = e.address ? "a" + e.address->str() : "a-";
        const std::string sel = e.selector ? "s" + e.selector->str() : "s-";
        const std::string vendor = e.selector ? "v" + std::to_string(e.selector->vendor) : "";

        std::vector<std::string> addr_keys = e.address ? std::vector<std::string>{"a-", addr}
                                                       : std::vector<std::string>{"a*"};
        std::vector<std::string> sel_keys{"s*"};
        if (e.selector && e.selector->device)
            sel_keys = {"s-", "s" + Selector{e.selector->vendor, std::nullopt}.str(), sel};
        else if (e.selector)
            sel_keys = {"s-", vendor};
        std::optional<Seen> hit;
        for (const auto& a : addr_keys)
            for (const auto& s : sel_keys)
                if (auto it = index.find(a + '|' + s); it != index.end())
                    hit = hit ? Seen{std::min(hit->first, it->second.first),
                                     hit->count + it->second.count}
                              : it->second;
        if (hit && out.room()) {
            const std::string first = entries[hit->first].origin.str();
            const size_t others = hit->count - 1;
            out.add(e.origin.str() + ": " + table + " can match the same functions as the entry at " +
                    first +
                    (others ? " (and " + std::to_string(others) + " more earlier " +
                                  (others == 1 ? "entry)" : "entries)")
                            : "") +
                    "; the first (" + first + ") wins");
        } else if (hit) {
            out.skip();
        }

        for (const auto& a : {addr, std::string("a*")})
            for (const auto& s : {sel, std::string("s*"), vendor}) {
                if (s.empty())
                    continue;
                ++index.try_emplace(a + '|' + s, Seen{j, 0}).first->second.count;
            }
    }
}

}  // namespace

void warn_overlaps(const Config& c, std::vector<std::string>& warnings) {
    overlaps_of(c.devices, "[[device]]", warnings);
    overlaps_of(c.sriovs, "[[sriov]]", warnings);
}

void check_resource_names(const Config& c, std::vector<std::string>& errors) {
    struct First {
        const std::string* name;
        const Origin* origin;
        const char* table;
    };
    // One socket namespace for both kinds; the variable's prefix differs (PCI_RESOURCE_ and
    // MDEV_PCI_RESOURCE_), so each kind has its own.
    std::map<std::string, First> sockets, device_envs, mdev_envs, kinds;
    std::set<std::pair<std::string, std::string>> reported;
    const size_t max = 20;
    size_t more = 0;
    auto fail = [&](const std::string& msg, const std::string& a, const std::string& b) {
        if (!reported.emplace(a, b).second)
            return;
        if (reported.size() > max)
            ++more;
        else
            errors.push_back(msg);
    };
    auto check = [&](const std::string& name, const Origin& origin, const char* table,
                     std::map<std::string, First>& envs) {
        if (name.empty())
            return;
        const First self{&name, &origin, table};
        const std::string_view prefix =
            &envs == &mdev_envs ? kMdevEnvPrefix : kPciEnvPrefix;
        // A resource is PCI functions or mdevs: KubeVirt reads the one kind from PCI_RESOURCE_
        // and the other from MDEV_PCI_RESOURCE_, so a VM asking for one could get the other.
        auto [k, fresh_kind] = kinds.try_emplace(name, self);
        if (!fresh_kind && k->second.table != table)
            fail(origin.str() + ": " + table + " resource_name " + config_quote(name) +
                     " is also the " + k->second.table + " entry's at " +
                     k->second.origin->str() +
                     ": a resource holds PCI functions or mediated devices, not both; rename "
                     "one of them",
                 name, std::string(table));
        for (auto* seen : {&sockets, &envs}) {
            std::string key =
                seen == &sockets ? plugin_socket_name(name) : plugin_env_name(name, prefix);
            auto [it, fresh] = seen->try_emplace(key, self);
            if (fresh || *it->second.name == name)
                continue;
            fail(origin.str() + ": " + table + " resource_name " + config_quote(name) +
                     " collides with " + config_quote(*it->second.name) + " of the entry at " +
                     it->second.origin->str() + ": " +
                     resource_name_collision(*it->second.name, name, prefix) +
                     "; rename one of them",
                 *it->second.name, name);
        }
    };
    for (const DeviceEntry& e : c.devices)
        check(e.resource_name, e.origin, "[[device]]", device_envs);
    for (const MdevEntry& e : c.mdevs)
        check(e.resource_name, e.origin, "[[mdev]]", mdev_envs);
    if (more)
        errors.push_back("... and " + std::to_string(more) + " more colliding resource names");
}

namespace {

// The parents an [[mdev]] entry names, as a key two entries share exactly when they name the
// same parents: the parent as written, or the selector.
std::string parents_key(const MdevEntry& e) {
    return e.selector ? "s" + e.selector->str() : "p" + e.parent;
}

const MdevEntry* earlier(const MdevEntry* a, const MdevEntry* b) {
    return !a ? b : !b ? a : std::min(a, b);  // both point into Config::mdevs: config order
}

}  // namespace

void check_mdev_entries(const Config& c, std::vector<std::string>& errors) {
    BoundedWarnings out(&errors, "[[mdev]] conflicts");
    using Key = std::pair<std::string, std::string>;  // (parents or vendor, type)
    // The first entry for each (parents, type); and per (vendor, type) the first entry naming
    // the whole vendor ("10de:*") and the first naming one of its devices ("10de:1eb8"): every
    // parent the second names, the first names too.
    std::map<Key, const MdevEntry*> pairs, wildcards, devices;
    for (const MdevEntry& e : c.mdevs) {
        const MdevEntry* first = nullptr;
        if (auto it = pairs.find({parents_key(e), e.type}); it != pairs.end())
            first = it->second;
        if (e.selector) {
            const Key vendor{std::to_string(e.selector->vendor), e.type};
            auto& other = e.selector->device ? wildcards : devices;
            if (auto it = other.find(vendor); it != other.end())
                first = earlier(first, it->second);
            (e.selector->device ? devices : wildcards).try_emplace(vendor, &e);
        }
        if (first)
            out.add(e.origin.str() + ": [[mdev]] for type " + config_quote(e.type) +
                    " names parents that the entry at " + first->origin.str() +
                    " names for the same type; one entry per parent and type");
        pairs.try_emplace({parents_key(e), e.type}, &e);
    }

    // A [[device]] entry whose every function an [[mdev]] entry names could only ever be
    // refused (mdev-parent): an error. One that merely can meet an mdev parent (a vendor's
    // wildcard, an address whose ID only the host knows) is the planner's to refuse.
    std::map<PciAddress, const MdevEntry*> by_address;
    std::map<std::string, const MdevEntry*> by_selector;  // "10de:1eb8", "10de:*"
    for (const MdevEntry& e : c.mdevs) {
        if (e.address)
            by_address.try_emplace(*e.address, &e);
        if (e.selector)
            by_selector.try_emplace(e.selector->str(), &e);
    }
    if (by_address.empty() && by_selector.empty())
        return;
    for (const DeviceEntry& d : c.devices) {
        const MdevEntry* m = nullptr;
        if (d.address)
            if (auto it = by_address.find(*d.address); it != by_address.end())
                m = it->second;
        if (d.selector) {
            if (auto it = by_selector.find(Selector{d.selector->vendor, std::nullopt}.str());
                it != by_selector.end())
                m = earlier(m, it->second);
            if (d.selector->device)
                if (auto it = by_selector.find(d.selector->str()); it != by_selector.end())
                    m = earlier(m, it->second);
        }
        if (m)
            out.add(d.origin.str() +
                    ": [[device]] can only match functions that the [[mdev]] entry at " +
                    m->origin.str() +
                    " makes mediated devices on, and vfiod never binds an mdev parent "
                    "(mdev-parent); remove one of the two");
    }
}

}  // namespace vfiod
