#include "devices.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/pci_paths.hpp"
#include "core/plan_json.hpp"
#include "core/state.hpp"

namespace vfiod::dra {

namespace {

constexpr std::string_view kDevicePrefix = "pci-";
constexpr size_t kMaxSubdomain = 253;

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// FNV-1a, 64 bits: a slice name must come out the same in every run and on every build (no
// std::hash, whose value is the library's business).
uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

// `s` as a DNS subdomain (RFC 1123, as Kubernetes checks object names): lower case, labels of
// [a-z0-9-] that start and end with a letter or digit, separated by single dots. Anything else
// becomes one '-' between alphanumerics, or goes.
std::string subdomain_form(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
        bool prev_alnum = !out.empty() && lower_alnum(out.back());
        if (lower_alnum(c))
            out += c;
        else if (prev_alnum)
            out += c == '.' ? '.' : '-';
    }
    while (!out.empty() && !lower_alnum(out.back()))
        out.pop_back();
    return out;
}

}  // namespace

std::string device_name(const PciAddress& a) {
    std::string s = a.str();  // "0000:01:00.0": lower-case hex, a DNS label once ':' and '.' go
    std::replace(s.begin(), s.end(), ':', '-');
    std::replace(s.begin(), s.end(), '.', '-');
    return std::string(kDevicePrefix) + s;
}

std::optional<PciAddress> parse_device_name(std::string_view name) {
    if (name.size() > 63 || !name.starts_with(kDevicePrefix))
        return std::nullopt;
    std::string text(name.substr(kDevicePrefix.size()));
    // DDDD-BB-SS-F back to DDDD:BB:SS.F: exactly three dashes, in that order.
    size_t dashes = std::count(text.begin(), text.end(), '-');
    if (dashes != 3)
        return std::nullopt;
    size_t last = text.rfind('-');
    text[last] = '.';
    std::replace(text.begin(), text.end(), '-', ':');
    auto a = PciAddress::parse(text);
    // parse() takes only the canonical form, so the name re-made from it is the one given.
    if (!a || device_name(*a) != name)
        return std::nullopt;
    return a;
}

const DraDevice* DraInventory::find(std::string_view name) const {
    auto it = std::lower_bound(devices.begin(), devices.end(), name,
                               [](const DraDevice& d, std::string_view n) { return d.name < n; });
    return it != devices.end() && it->name == name ? &*it : nullptr;
}

std::shared_ptr<const DraInventory> make_inventory(const client::DaemonView& view,
                                                   const std::function<bool(unsigned)>& vfio_exists,
                                                   const HostFs& host,
                                                   const DraInventory* before) {
    auto inv = std::make_shared<DraInventory>();
    // The device model's rule decides health (make_snapshot); each group's /dev/vfio node is
    // asked once, and the answer given to the snapshot is the one used here.
    std::map<unsigned, bool> present;
    auto exists = [&](unsigned g) {
        auto [it, fresh] = present.try_emplace(g, false);
        if (fresh)
            it->second = vfio_exists(g);
        return it->second;
    };
    inv->snapshot = plugin::make_snapshot(view, exists);
    for (const auto& g : view.groups) {
        // Health as the device model has it: State bound and /dev/vfio/<N> present.
        // Walked here rather than through snapshot.resources because DRA serves allowlisted
        // functions without a resource_name too, and names that would collide as device-plugin
        // sockets are no problem for DRA.
        if (!g.plan.group || g.state_value != GroupState::Bound || !exists(*g.plan.group))
            continue;
        for (const auto& d : g.plan.devices) {
            if (d.role != Role::Allowlisted)
                continue;
            DraDevice out;
            out.name = device_name(d.address);
            out.address = d.address;
            out.group = *g.plan.group;
            out.resource_name = d.resource_name.value_or("");
            out.vendor = d.vendor;
            out.device = d.device;
            out.class_code = d.class_code;
            out.driver = d.driver;
            out.numa_node = d.numa_node;
            const DraDevice* known = before ? before->find(out.name) : nullptr;
            if (known && known->address == d.address)
                out.pcie_root = known->pcie_root;
            else if (auto where = host.resolve(pci_paths::device(d.address))) {
                // "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0" -> "pci0000:00"
                constexpr std::string_view devices_dir = "sys/devices/";
                if (where->starts_with(devices_dir)) {
                    std::string rest = where->substr(devices_dir.size());
                    std::string first = rest.substr(0, rest.find('/'));
                    if (first.starts_with("pci") && first.size() > 3)
                        out.pcie_root = first;
                }
            }
            inv->devices.push_back(std::move(out));
        }
    }
    std::sort(inv->devices.begin(), inv->devices.end(),
              [](const DraDevice& a, const DraDevice& b) { return a.name < b.name; });
    // One function appears once in vfiod's inventory; a view that lists it twice is kept to its
    // first record rather than publishing a name twice (the API refuses duplicate names).
    inv->devices.erase(std::unique(inv->devices.begin(), inv->devices.end(),
                                   [](const DraDevice& a, const DraDevice& b) {
                                       return a.name == b.name;
                                   }),
                       inv->devices.end());
    return inv;
}

nlohmann::json device_attributes(const DraDevice& d, std::vector<std::string>* omitted) {
    nlohmann::json a = nlohmann::json::object();
    auto str = [&](const std::string& key, const std::string& value) {
        if (value.size() > kMaxStringAttribute) {
            if (omitted)
                omitted->push_back(key);
            return;
        }
        a[key] = {{"string", value}};
    };
    str("resource.kubernetes.io/pciBusID", d.address.str());
    if (!d.pcie_root.empty())
        str("resource.kubernetes.io/pcieRoot", d.pcie_root);
    if (!d.resource_name.empty())
        str("resourceName", d.resource_name);
    str("vendor", hex4(d.vendor));
    str("device", hex4(d.device));
    str("class", hex6(d.class_code));
    a["iommuGroup"] = {{"int", static_cast<int64_t>(d.group)}};
    if (d.numa_node >= 0)
        a["numaNode"] = {{"int", static_cast<int64_t>(d.numa_node)}};
    if (!d.driver.empty())
        str("driver", d.driver);
    return a;
}

std::string slice_name(const Pool& pool, size_t index) {
    const std::string suffix = "-" + std::to_string(index);
    const std::string raw = pool.node + "-" + pool.driver;
    std::string base = subdomain_form(raw);
    if (base == raw && base.size() + suffix.size() <= kMaxSubdomain)
        return base + suffix;
    // Cut or changed: a hash of what was meant keeps two such pools apart.
    char hash[20];
    std::snprintf(hash, sizeof hash, "-%016llx",
                  static_cast<unsigned long long>(fnv1a(pool.node + '\0' + pool.driver)));
    size_t room = kMaxSubdomain - suffix.size() - std::string_view(hash).size();
    if (base.size() > room)
        base.resize(room);
    while (!base.empty() && !lower_alnum(base.back()))
        base.pop_back();
    if (base.empty())
        return std::string("pool") + hash + suffix;
    return base + hash + suffix;
}

std::vector<nlohmann::json> make_slices(const std::vector<DraDevice>& devices, const Pool& pool,
                                        std::vector<std::string>* omitted) {
    std::vector<const DraDevice*> sorted;
    sorted.reserve(devices.size());
    for (const auto& d : devices)
        sorted.push_back(&d);
    std::sort(sorted.begin(), sorted.end(),
              [](const DraDevice* a, const DraDevice* b) { return a->name < b->name; });

    std::vector<nlohmann::json> slices;
    const size_t count = (sorted.size() + kMaxDevicesPerSlice - 1) / kMaxDevicesPerSlice;
    for (size_t i = 0; i < count; ++i) {
        nlohmann::json list = nlohmann::json::array();
        size_t end = std::min(sorted.size(), (i + 1) * kMaxDevicesPerSlice);
        for (size_t k = i * kMaxDevicesPerSlice; k < end; ++k) {
            std::vector<std::string> left_out;
            nlohmann::json attrs = device_attributes(*sorted[k], &left_out);
            if (omitted)
                for (const auto& name : left_out)
                    omitted->push_back(sorted[k]->name + ": " + name);
            list.push_back({{"name", sorted[k]->name}, {"attributes", std::move(attrs)}});
        }
        nlohmann::json meta = {{"name", slice_name(pool, i)}};
        if (!pool.node_uid.empty())
            meta["ownerReferences"] = nlohmann::json::array({{{"apiVersion", "v1"},
                                                              {"kind", "Node"},
                                                              {"name", pool.node},
                                                              {"uid", pool.node_uid},
                                                              {"controller", true}}});
        slices.push_back({{"apiVersion", "resource.k8s.io/v1"},
                          {"kind", "ResourceSlice"},
                          {"metadata", std::move(meta)},
                          {"spec",
                           {{"driver", pool.driver},
                            {"nodeName", pool.node},
                            {"pool",
                             {{"name", pool.node},
                              {"generation", pool.generation},
                              {"resourceSliceCount", static_cast<int64_t>(count)}}},
                            {"devices", std::move(list)}}}});
    }
    return slices;
}

}  // namespace vfiod::dra
