#include "io/config_schema.hpp"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include <toml++/toml.h>

#include "core/config_checks.hpp"
#include "core/resource_names.hpp"
#include "core/strings.hpp"
#include "core/toml_prescan.hpp"

namespace vfiod {

namespace {

const char* type_name(toml::node_type t) {
    switch (t) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
    }
    return "nothing";
}

// The name is written to driver_override, so anything that is not a vfio driver (e.g. "nvidia")
// would hand the device to a host driver instead of isolating it.
bool valid_driver(std::string_view s) {
    return !s.empty() && s.find("vfio") != std::string_view::npos &&
           std::all_of(s.begin(), s.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
           });
}

// The top-level tables a file may hold, as every "unknown" message lists them.
constexpr const char* kTables = "[daemon], [[device]], [[protect]], [[sriov]] or [[mdev]]";

// Validates one parsed document. Errors are collected with their positions and reported in
// document order (toml++ tables iterate by key name, not by position).
class Checker {
public:
    explicit Checker(const std::string& file) : file_(file) {}

    Fragment check(const toml::table& doc) {
        Fragment f;
        for (auto&& [key, node] : doc) {
            if (key == "daemon")
                daemon(node, f);
            else if (key == "device")
                entries(key, node, f.devices, &Checker::device);
            else if (key == "protect")
                entries(key, node, f.protects, &Checker::protect);
            else if (key == "sriov")
                entries(key, node, f.sriovs, &Checker::sriov);
            else if (key == "mdev")
                entries(key, node, f.mdevs, &Checker::mdev);
            else if (node.is_table())
                error(node, "unknown table [" + printable(key.str()) + "]; expected " + kTables);
            else if (node.is_array_of_tables())
                error(node, "unknown table [[" + printable(key.str()) + "]]; expected " + kTables);
            else
                error(key, "unknown key " + config_quote(key.str()) + "; expected " + kTables);
        }
        return f;
    }

    void error(toml::source_position at, std::string msg) {
        errors_.push_back({at.line, at.column, std::move(msg)});
    }

    void flush(std::vector<std::string>& out) {
        std::stable_sort(errors_.begin(), errors_.end(), [](const auto& a, const auto& b) {
            return std::tie(a.line, a.column) < std::tie(b.line, b.column);
        });
        for (auto& e : errors_)
            out.push_back(file_ + ':' + std::to_string(e.line) + ':' + std::to_string(e.column) +
                          ": " + e.msg);
        errors_.clear();
    }

private:
    struct Located {
        unsigned line;
        unsigned column;
        std::string msg;
    };

    // Unknown keys point at the key; bad values at the value; tables at their header.
    void error(const toml::key& k, std::string msg) { error(k.source().begin, std::move(msg)); }
    void error(const toml::node& n, std::string msg) { error(n.source().begin, std::move(msg)); }

    Origin origin(const toml::node& n) const {
        return {file_, n.source().begin.line, n.source().begin.column};
    }

    std::string name(std::string_view table, const toml::key& k) const {
        return std::string(table) + '.' + printable(k.str());
    }

    bool expect(std::string_view table, const toml::key& k, const toml::node& v,
                toml::node_type want) {
        if (v.type() == want)
            return true;
        error(v, name(table, k) + ": expected " + type_name(want) + ", got " + type_name(v.type()));
        return false;
    }

    void unknown(std::string_view table, const toml::key& k, const char* expected) {
        error(k, "unknown key " + config_quote(k.str()) + " in " + std::string(table) + "; expected " +
                     expected);
    }

    void daemon(const toml::node& node, Fragment& f) {
        const auto* t = node.as_table();
        if (!t) {
            error(node, "daemon: expected a table ([daemon]), got " +
                            std::string(type_name(node.type())));
            return;
        }
        for (auto&& [k, v] : *t) {
            if (k == "mode") {
                if (!expect("daemon", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (s == "enforce")
                    f.mode = Mode::Enforce;
                else if (s == "observe")
                    f.mode = Mode::Observe;
                else
                    error(v, "daemon.mode: unknown mode " + config_quote(s) +
                                 "; expected \"enforce\" or \"observe\"");
            } else if (k == "write_timeout") {
                if (!expect("daemon", k, v, toml::node_type::integer))
                    continue;
                auto n = v.as_integer()->get();
                if (n < 1 || n > 3600)
                    error(v, "daemon.write_timeout: " + std::to_string(n) +
                                 " is out of range; expected 1..3600 seconds");
                else
                    f.write_timeout = static_cast<unsigned>(n);
            } else if (k == "companions") {
                if (!expect("daemon", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (s == "bind")
                    f.companions = CompanionPolicy::Bind;
                else if (s == "refuse")
                    f.companions = CompanionPolicy::Refuse;
                else
                    error(v, "daemon.companions: unknown policy " + config_quote(s) +
                                 "; expected \"bind\" or \"refuse\"");
            } else if (k == "allow_boot_vga") {
                if (expect("daemon", k, v, toml::node_type::boolean))
                    f.allow_boot_vga = v.as_boolean()->get();
            } else {
                unknown("[daemon]", k, "mode, write_timeout, companions or allow_boot_vga");
            }
        }
    }

    template <typename Entry>
    void entries(const toml::key& key, const toml::node& node, std::vector<Entry>& out,
                 std::optional<Entry> (Checker::*one)(const toml::table&)) {
        const std::string table(key.str());
        const auto* arr = node.as_array();
        if (!arr) {
            error(node, table + ": expected an array of tables ([[" + table + "]]), got " +
                            type_name(node.type()) +
                            (node.is_table() ? " ([" + table + "])" : std::string()));
            return;
        }
        for (const auto& elem : *arr) {
            if (const auto* t = elem.as_table()) {
                if (auto e = (this->*one)(*t))
                    out.push_back(std::move(*e));
            } else {
                error(elem, table + ": each entry must be a table ([[" + table + "]]), got " +
                                type_name(elem.type()));
            }
        }
    }

    // selector and address mean the same in [[device]] and [[protect]]. Returns false when k is
    // neither.
    bool match_key(std::string_view table, const toml::key& k, const toml::node& v,
                   std::optional<Selector>& sel, std::optional<PciAddress>& addr) {
        std::string why;
        if (k == "selector") {
            if (!expect(table, k, v, toml::node_type::string))
                return true;
            const auto& s = v.as_string()->get();
            if (!(sel = Selector::parse(s, &why)))
                error(v, name(table, k) + ": invalid selector " + config_quote(s) + ": " + why);
            return true;
        }
        if (k == "address") {
            if (!expect(table, k, v, toml::node_type::string))
                return true;
            if (!(addr = PciAddress::parse(v.as_string()->get(), &why)))
                error(v, name(table, k) + ": " + why);
            return true;
        }
        return false;
    }

    // A resource name the kubelet takes and the plugin can serve, into `out`; else an error at v
    // (`table`.resource_name) and `out` untouched.
    void resource_name(std::string_view table, const toml::node& v, std::string& out) {
        const auto& s = v.as_string()->get();
        const std::string key = std::string(table) + ".resource_name: ";
        if (auto why = resource_name_problem(s); !why.empty())
            error(v, key + "invalid resource name " + config_quote(s) + ": " + why +
                         " (Kubernetes extended resource names, e.g. "
                         "nvidia.com/GH100_H100_PCIE)");
        else if (auto far = socket_path_problem(s); !far.empty())
            error(v, key + config_quote(s) + " cannot be served: " + far +
                         " (resource names of up to " +
                         std::to_string(kMaxSocketPath - kKubeletPluginDir.size() -
                                        sizeof "/vfiod-.sock" + 1) +
                         " characters fit)");
        else
            out = s;
    }

    std::optional<DeviceEntry> device(const toml::table& t) {
        const size_t before = errors_.size();
        DeviceEntry e;
        e.origin = origin(t);
        bool named = false;  // a selector or address key was given, valid or not
        for (auto&& [k, v] : t) {
            if (match_key("device", k, v, e.selector, e.address)) {
                named = true;
            } else if (k == "resource_name") {
                if (expect("device", k, v, toml::node_type::string))
                    resource_name("device", v, e.resource_name);
            } else if (k == "driver") {
                if (!expect("device", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (valid_driver(s))
                    e.driver = s;
                else
                    error(v, "device.driver: " + config_quote(s) +
                                 " is not a vfio driver; expected vfio-pci or a vfio variant "
                                 "driver ([a-z0-9_-], containing \"vfio\")");
            } else if (k == "early") {
                if (expect("device", k, v, toml::node_type::boolean))
                    e.early = v.as_boolean()->get();
            } else {
                unknown("[[device]]", k, "selector, address, resource_name, driver or early");
            }
        }
        if (!named)
            error(t, "[[device]] needs a selector or an address");
        if (errors_.size() != before)
            return std::nullopt;
        return e;
    }

    std::optional<ProtectEntry> protect(const toml::table& t) {
        const size_t before = errors_.size();
        ProtectEntry e;
        e.origin = origin(t);
        bool named = false;
        for (auto&& [k, v] : t) {
            if (match_key("protect", k, v, e.selector, e.address))
                named = true;
            else
                unknown("[[protect]]", k, "selector or address");
        }
        if (!named)
            error(t, "[[protect]] needs a selector or an address");
        if (errors_.size() != before)
            return std::nullopt;
        return e;
    }

    // num_vfs is required: an entry that only named PFs would be read as "never bind them",
    // which [[protect]] says better.
    std::optional<SriovEntry> sriov(const toml::table& t) {
        const size_t before = errors_.size();
        SriovEntry e;
        e.origin = origin(t);
        bool named = false, counted = false;
        for (auto&& [k, v] : t) {
            if (match_key("sriov", k, v, e.selector, e.address)) {
                named = true;
            } else if (k == "num_vfs") {
                counted = true;
                if (expect("sriov", k, v, toml::node_type::integer))
                    num_vfs(*v.as_integer(), e);
            } else {
                unknown("[[sriov]]", k, "selector, address or num_vfs");
            }
        }
        if (!named)
            error(t, "[[sriov]] needs a selector or an address");
        if (!counted)
            error(t, "[[sriov]] needs num_vfs");
        if (errors_.size() != before)
            return std::nullopt;
        return e;
    }

    // DESIGN §12. The parent is named once: by `parent` (an address, or a virtual parent's name)
    // or by `selector`, never both, since "this slot, if it has that ID" says nothing an admin
    // could not say with the address alone.
    std::optional<MdevEntry> mdev(const toml::table& t) {
        const size_t before = errors_.size();
        MdevEntry e;
        e.origin = origin(t);
        bool named = false, typed = false, counted = false, has_name = false;
        const toml::node* parent = nullptr;
        const toml::node* type = nullptr;
        for (auto&& [k, v] : t) {
            if (k == "parent") {
                parent = &v;
                if (expect("mdev", k, v, toml::node_type::string))
                    mdev_parent(v, e);
            } else if (k == "selector") {
                named = true;
                std::optional<PciAddress> unused;
                match_key("mdev", k, v, e.selector, unused);
            } else if (k == "type") {
                typed = true;
                type = &v;
                if (!expect("mdev", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (auto why = mdev_type_problem(s); !why.empty())
                    error(v, "mdev.type: invalid type " + config_quote(s) + ": " + why);
                else
                    e.type = s;
            } else if (k == "count") {
                counted = true;
                if (expect("mdev", k, v, toml::node_type::integer))
                    mdev_count(*v.as_integer(), e);
            } else if (k == "resource_name") {
                has_name = true;
                if (expect("mdev", k, v, toml::node_type::string))
                    resource_name("mdev", v, e.resource_name);
            } else {
                unknown("[[mdev]]", k, "parent, selector, type, count or resource_name");
            }
        }
        if (parent && named)
            error(*parent, "[[mdev]] names its parents by parent or by selector, not both");
        else if (!parent && !named)
            error(t, "[[mdev]] needs a parent or a selector");
        if (!typed)
            error(t, "[[mdev]] needs a type");
        if (!counted)
            error(t, "[[mdev]] needs count");
        if (typed && !has_name && !e.type.empty())
            default_resource_name(*type, e);
        if (errors_.size() != before)
            return std::nullopt;
        return e;
    }

    // The default must be a name the kubelet takes too; a type that cannot give one needs its
    // own resource_name (an error at the type).
    void default_resource_name(const toml::node& type, MdevEntry& e) {
        e.resource_name = default_mdev_resource_name(e.type);
        const std::string what = "mdev.type: the default resource name " +
                                 config_quote(e.resource_name);
        if (auto why = resource_name_problem(e.resource_name); !why.empty())
            error(type, what + " of type " + config_quote(e.type) + " is invalid: " + why +
                            "; give the entry a resource_name");
        else if (auto far = socket_path_problem(e.resource_name); !far.empty())
            error(type, what + " cannot be served: " + far +
                            "; give the entry a shorter resource_name");
    }

    // A PCI address (anything with ':') or a virtual parent's name under sys/class/mdev_bus.
    void mdev_parent(const toml::node& v, MdevEntry& e) {
        const auto& s = v.as_string()->get();
        std::string why;
        if (s.find(':') != std::string::npos) {
            if (!(e.address = PciAddress::parse(s, &why)))
                error(v, "mdev.parent: " + why);
            else
                e.parent = s;
        } else if (why = mdev_parent_problem(s); !why.empty()) {
            error(v, "mdev.parent: invalid parent " + config_quote(s) + ": " + why);
        } else {
            e.parent = s;
        }
    }

    void mdev_count(const toml::value<int64_t>& v, MdevEntry& e) {
        const int64_t n = v.get();
        if (n < 0 || n > kMaxMdevCount)
            error(v, "mdev.count: " + std::to_string(n) + " is out of range; expected 0.." +
                         std::to_string(kMaxMdevCount) +
                         " (vfiod knows its own mdevs by the UUIDs of the first " +
                         std::to_string(kMaxMdevCount) + " indices)");
        else
            e.count = static_cast<unsigned>(n);
    }

    // The kernel parses sriov_numvfs with kstrtou16: anything wider would fail every write.
    void num_vfs(const toml::value<int64_t>& v, SriovEntry& e) {
        const int64_t n = v.get();
        if (n < 0 || n > UINT16_MAX)
            error(v, "sriov.num_vfs: " + std::to_string(n) +
                         " is out of range; expected 0..65535 (the kernel's sriov_numvfs is 16 "
                         "bits)");
        else
            e.num_vfs = static_cast<uint16_t>(n);
    }

    const std::string& file_;
    std::vector<Located> errors_;
};

}  // namespace

void merge_fragment(Fragment&& f, Config& c) {
    if (f.mode)
        c.mode = *f.mode;
    if (f.write_timeout)
        c.write_timeout = *f.write_timeout;
    if (f.companions)
        c.companions = *f.companions;
    if (f.allow_boot_vga)
        c.allow_boot_vga = *f.allow_boot_vga;
    std::move(f.devices.begin(), f.devices.end(), std::back_inserter(c.devices));
    std::move(f.protects.begin(), f.protects.end(), std::back_inserter(c.protects));
    std::move(f.sriovs.begin(), f.sriovs.end(), std::back_inserter(c.sriovs));
    std::move(f.mdevs.begin(), f.mdevs.end(), std::back_inserter(c.mdevs));
}

std::optional<Fragment> parse_fragment(std::string_view text, const std::string& name,
                                       std::vector<std::string>& errors) {
    Checker checker(name);
    std::optional<Fragment> f;
    if (auto deep = find_deep_key(text)) {
        checker.error(toml::source_position{deep->where.line, deep->where.column}, "key nested too deeply: " + deep->why +
                                       "; refusing to parse the file");
        checker.flush(errors);
        return std::nullopt;
    }
    try {
        auto doc = toml::parse(text, std::string_view(name));
        f = checker.check(doc);
    } catch (const toml::parse_error& e) {
        // toml++ quotes the offending input raw (a newline, an escape sequence): escape it too.
        checker.error(e.source().begin, "TOML syntax error: " + printable(e.description(), 512));
    }
    const size_t before = errors.size();
    checker.flush(errors);
    if (errors.size() != before)
        return std::nullopt;
    return f;
}

}  // namespace vfiod
