#include "config_loader.hpp"

#include "core/resource_names.hpp"
#include "core/strings.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <toml++/toml.h>

namespace vfiod {

namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kMaxFileBytes = 1 << 20;

std::string in_quotes(std::string_view s) { return '"' + printable(s) + '"'; }

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

// One file's settings. [daemon] keys stay unset unless the file sets them, so a later file
// overrides only what it says.
struct Fragment {
    std::optional<Mode> mode;
    std::optional<unsigned> write_timeout;
    std::optional<CompanionPolicy> companions;
    std::optional<bool> allow_boot_vga;
    std::vector<DeviceEntry> devices;
    std::vector<ProtectEntry> protects;
};

void apply(Fragment&& f, Config& c) {
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
}

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
            else if (node.is_table())
                error(node, "unknown table [" + printable(key.str()) +
                                "]; expected [daemon], [[device]] or [[protect]]");
            else if (node.is_array_of_tables())
                error(node, "unknown table [[" + printable(key.str()) +
                                "]]; expected [daemon], [[device]] or [[protect]]");
            else
                error(key, "unknown key " + in_quotes(key.str()) +
                               "; expected [daemon], [[device]] or [[protect]]");
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
        error(k, "unknown key " + in_quotes(k.str()) + " in " + std::string(table) + "; expected " +
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
                    error(v, "daemon.mode: unknown mode " + in_quotes(s) +
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
                    error(v, "daemon.companions: unknown policy " + in_quotes(s) +
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
                error(v, name(table, k) + ": invalid selector " + in_quotes(s) + ": " + why);
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

    std::optional<DeviceEntry> device(const toml::table& t) {
        const size_t before = errors_.size();
        DeviceEntry e;
        e.origin = origin(t);
        bool named = false;  // a selector or address key was given, valid or not
        for (auto&& [k, v] : t) {
            if (match_key("device", k, v, e.selector, e.address)) {
                named = true;
            } else if (k == "resource_name") {
                if (!expect("device", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (auto why = resource_name_problem(s); !why.empty())
                    error(v, "device.resource_name: invalid resource name " + in_quotes(s) +
                                 ": " + why +
                                 " (Kubernetes extended resource names, e.g. "
                                 "nvidia.com/GH100_H100_PCIE)");
                else if (auto far = socket_path_problem(s); !far.empty())
                    error(v, "device.resource_name: " + in_quotes(s) + " cannot be served: " +
                                 far + " (resource names of up to " +
                                 std::to_string(kMaxSocketPath - kKubeletPluginDir.size() -
                                                sizeof "/vfiod-.sock" + 1) +
                                 " characters fit)");
                else
                    e.resource_name = s;
            } else if (k == "driver") {
                if (!expect("device", k, v, toml::node_type::string))
                    continue;
                const auto& s = v.as_string()->get();
                if (valid_driver(s))
                    e.driver = s;
                else
                    error(v, "device.driver: " + in_quotes(s) +
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

    const std::string& file_;
    std::vector<Located> errors_;
};

// toml++ 3.3 parses a dotted key (`a.b.c = 1`, `[a.b.c]`, `[[a.b.c]]`) recursively, a few stack
// frames a component: 40,000 components, far under the size cap, overflow the stack and kill
// vfioctl and vfiod alike. No config needs more than three, so a key with more components than
// this is refused before toml++ sees the document.
constexpr unsigned kMaxKeyComponents = 64;
// Inline tables and arrays recurse too, and the two multiply: toml++'s own limit of 256 levels,
// each keyed with 64 components, needs 1-2 MB of stack. No config nests more than a few levels.
constexpr unsigned kMaxBrackets = 16;

struct DeepSpot {
    toml::source_position where;
    std::string why;
};

// Where the first dotted key with more than kMaxKeyComponents components starts, or the bracket
// that opens level kMaxBrackets + 1. A small lexer that knows just enough TOML — comments and
// the four string forms — to tell the dots between key components and the brackets of tables
// and arrays from those inside strings and comments. It errs only towards counting: floats
// ("1.5") and values give runs of two at most.
std::optional<DeepSpot> find_deep_key(std::string_view t) {
    toml::source_position pos{1, 1}, run_start{1, 1};
    size_t i = 0, run = 0, brackets = 0;
    bool dot = false;  // the run ends in '.', waiting for its next component
    auto advance = [&](size_t n) {
        for (size_t end = std::min(t.size(), i + n); i < end; ++i) {
            unsigned char c = static_cast<unsigned char>(t[i]);
            if (c == '\n') {
                ++pos.line;
                pos.column = 1;
            } else if ((c & 0xc0) != 0x80) {
                ++pos.column;
            }
        }
    };
    auto component = [&](toml::source_position start) -> bool {
        if (!dot) {
            run = 0;
            run_start = start;
        }
        dot = false;
        return ++run > kMaxKeyComponents;
    };
    auto too_many_components = [&] {
        return DeepSpot{run_start,
                        "more than " + std::to_string(kMaxKeyComponents) + " dotted components"};
    };
    auto bare = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-';
    };
    while (i < t.size()) {
        const char c = t[i];
        const toml::source_position start = pos;
        if (c == ' ' || c == '\t') {
            advance(1);
        } else if (c == '.') {
            if (run == 0 || dot)
                run = 0;
            dot = run > 0;
            advance(1);
        } else if (c == '#') {
            advance(t.find('\n', i) == std::string_view::npos ? t.size() : t.find('\n', i) - i);
            run = 0, dot = false;
        } else if (c == '"' || c == '\'') {
            const std::string triple(3, c);
            const bool multi = t.substr(i, 3) == triple;
            const std::string close = multi ? triple : std::string(1, c);
            advance(close.size());
            while (i < t.size() && t.substr(i, close.size()) != close) {
                if (c == '"' && t[i] == '\\')
                    advance(2);  // basic strings: an escaped quote does not end them
                else if (!multi && t[i] == '\n')
                    break;  // unterminated: toml++ reports it
                else
                    advance(1);
            }
            // A multi-line string may end in up to two quotes of its own before the delimiter.
            while (multi && t.substr(i, 4) == std::string(4, c))
                advance(1);
            advance(close.size());
            if (component(start))
                return too_many_components();
        } else if (bare(c)) {
            while (i < t.size() && bare(t[i]))
                advance(1);
            if (component(start))
                return too_many_components();
        } else {
            if ((c == '[' || c == '{') && ++brackets > kMaxBrackets)
                return DeepSpot{start, "more than " + std::to_string(kMaxBrackets) +
                                           " levels of nested tables and arrays"};
            if ((c == ']' || c == '}') && brackets > 0)
                --brackets;
            run = 0, dot = false;
            advance(1);
        }
    }
    return std::nullopt;
}

// Parses and checks one document; nullopt when it has errors (appended to errors).
std::optional<Fragment> parse_fragment(std::string_view text, const std::string& name,
                                       std::vector<std::string>& errors) {
    Checker checker(name);
    std::optional<Fragment> f;
    if (auto deep = find_deep_key(text)) {
        checker.error(deep->where, "key nested too deeply: " + deep->why +
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

// Overlaps among [[device]] entries matter because the first one's resource_name and driver
// win. A [[protect]] entry always wins over a device entry, so that overlap is not news.
//
// Two entries can match one function unless their addresses differ or their selectors do (another
// vendor, or two different devices). Comparing every pair is quadratic: 4,000 copies of one
// entry took 25 s and 1.6 GB. Instead every entry is filed under the few keys a later entry can
// look it up by — its address or "no address" or "any address", crossed with its selector, its
// vendor or "any selector" — and each later entry asks only the keys that can overlap it. Those
// keys partition the earlier entries that can overlap, so their counts add up.
void warn_overlaps(const Config& c, std::vector<std::string>& warnings) {
    struct Seen {
        size_t first;
        size_t count;
    };
    std::map<std::string, Seen> index;
    BoundedWarnings out(&warnings, "overlapping [[device]] entries");
    for (size_t j = 0; j < c.devices.size(); ++j) {
        const DeviceEntry& e = c.devices[j];
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
            const std::string first = c.devices[hit->first].origin.str();
            const size_t others = hit->count - 1;
            out.add(e.origin.str() + ": [[device]] can match the same functions as the entry at " +
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

// Two different resource names that the device plugin would serve on one socket, or hand to a VM
// in one environment variable (DESIGN §9): the kubelet would list one resource's devices under
// the other's name. An error, naming both entries; one map lookup per entry, whatever their number.
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
                             in_quotes(e.resource_name) + " collides with " +
                             in_quotes(*it->second.name) + " of the entry at " +
                             it->second.origin->str() + ": " +
                             resource_name_collision(*it->second.name, e.resource_name) +
                             "; rename one of them");
        }
    }
    if (more)
        errors.push_back("... and " + std::to_string(more) + " more colliding resource names");
}

enum class ReadStatus { Ok, Missing, Failed };

ReadStatus read_file(const fs::path& p, std::string* text, std::string* why) {
    std::error_code ec;
    auto st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found)
        return ReadStatus::Missing;
    if (ec) {
        *why = "cannot read: " + ec.message();
        return ReadStatus::Failed;
    }
    if (!fs::is_regular_file(st)) {
        *why = "cannot read: not a regular file";
        return ReadStatus::Failed;
    }
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        *why = "cannot read: " + std::error_code(errno, std::generic_category()).message();
        return ReadStatus::Failed;
    }
    // Read one byte past the cap instead of trusting file_size: the file may grow meanwhile.
    text->resize(kMaxFileBytes + 1);
    in.read(text->data(), static_cast<std::streamsize>(text->size()));
    if (in.bad()) {
        *why = "cannot read: I/O error";
        return ReadStatus::Failed;
    }
    text->resize(static_cast<size_t>(in.gcount()));
    if (text->size() > kMaxFileBytes) {
        *why = "larger than 1 MiB; refusing to read it";
        return ReadStatus::Failed;
    }
    return ReadStatus::Ok;
}

// conf.d/*.toml in byte order of the names; a missing directory is simply empty.
std::vector<fs::path> list_confd(const fs::path& dir, std::vector<std::string>& errors) {
    std::vector<fs::path> out;
    std::error_code ec;
    auto st = fs::status(dir, ec);
    if (st.type() == fs::file_type::not_found)
        return out;
    if (!ec && !fs::is_directory(st)) {
        errors.push_back(dir.string() + ": not a directory");
        return out;
    }
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        auto n = it->path().filename().string();
        if (n.size() > 5 && n.front() != '.' && n.ends_with(".toml"))
            out.push_back(it->path());
    }
    if (ec) {
        errors.push_back(dir.string() + ": cannot list: " + ec.message());
        return {};
    }
    std::sort(out.begin(), out.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
    return out;
}

ConfigResult finish(Config&& c, std::vector<std::string>&& errors,
                    std::vector<std::string>&& warnings) {
    ConfigResult r;
    if (errors.empty())
        check_resource_names(c, errors);
    if (errors.empty()) {
        warn_overlaps(c, warnings);
        r.config = std::move(c);
    }
    r.errors = std::move(errors);
    r.warnings = std::move(warnings);
    return r;
}

ConfigResult internal_error(const std::string& name, const char* what) {
    ConfigResult r;
    r.errors.push_back(name + ": internal error: " + what);
    return r;
}

}  // namespace

ConfigResult parse_config(std::string_view text, const std::string& name) {
    try {
        std::vector<std::string> errors;
        Config c;
        if (auto f = parse_fragment(text, name, errors))
            apply(std::move(*f), c);
        c.files.push_back(name);
        return finish(std::move(c), std::move(errors), {});
    } catch (const std::exception& e) {
        return internal_error(name, e.what());
    } catch (...) {
        return internal_error(name, "unknown exception");
    }
}

ConfigResult load_config(const std::string& root, const std::optional<std::string>& file) {
    const fs::path main = file ? fs::path(*file) : fs::path(root) / "etc/vfiod/vfiod.toml";
    try {
        std::vector<std::string> errors, warnings;
        Config c;
        auto load = [&](const fs::path& p, bool may_be_missing) {
            std::string text, why;
            switch (read_file(p, &text, &why)) {
            case ReadStatus::Missing:
                if (!may_be_missing)
                    errors.push_back(p.string() + ": cannot read: not found");
                return false;
            case ReadStatus::Failed:
                errors.push_back(p.string() + ": " + why);
                return false;
            case ReadStatus::Ok:
                break;
            }
            if (auto f = parse_fragment(text, p.string(), errors))
                apply(std::move(*f), c);
            c.files.push_back(p.string());
            return true;
        };
        const bool found = load(main, !file);
        const auto extra = list_confd(main.parent_path() / "conf.d", errors);
        for (const auto& p : extra)
            load(p, false);
        if (!found && !file)
            warnings.push_back(main.string() + (extra.empty()
                                                    ? ": not found; the allowlist is empty"
                                                    : ": not found; using conf.d only"));
        return finish(std::move(c), std::move(errors), std::move(warnings));
    } catch (const std::exception& e) {
        return internal_error(main.string(), e.what());
    } catch (...) {
        return internal_error(main.string(), "unknown exception");
    }
}

}  // namespace vfiod
