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
    };
    std::map<std::string, First> sockets, envs;
    std::set<std::pair<std::string, std::string>> reported;
    const size_t max = 20;
    size_t more = 0;
    for (const DeviceEntry& e : c.devices) {
        if (e.resource_name.empty())
            continue;
        for (auto* seen : {&sockets, &envs}) {
            std::string key = seen == &sockets ? plugin_socket_name(e.resource_name)
                                               : plugin_env_name(e.resource_name);
            auto [it, fresh] = seen->try_emplace(key, First{&e.resource_name, &e.origin});
            if (fresh || *it->second.name == e.resource_name ||
                !reported.emplace(*it->second.name, e.resource_name).second)
                continue;
            if (reported.size() > max) {
                ++more;
                continue;
            }
            errors.push_back(e.origin.str() + ": [[device]] resource_name " +
                             config_quote(e.resource_name) + " collides with " +
                             config_quote(*it->second.name) + " of the entry at " +
                             it->second.origin->str() + ": " +
                             resource_name_collision(*it->second.name, e.resource_name) +
                             "; rename one of them");
        }
    }
    if (more)
        errors.push_back("... and " + std::to_string(more) + " more colliding resource names");
}

}  // namespace vfiod
