#include "initramfs.hpp"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "core/json.hpp"
#include "core/plan_json.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod::cli {

namespace {

constexpr size_t kMaxRecordBytes = 1 << 20;
constexpr std::string_view kRecordPrefix = "initramfs-", kRecordSuffix = ".json";

void write_set(JsonWriter& w, const EarlySet& set) {
    w.key("carried").begin_array();
    for (const EarlyFunction& f : set.carried) {
        w.begin_object().key("address").value(f.address.str());
        w.key("vendor").value(hex4(f.vendor)).key("device").value(hex4(f.device));
        w.key("driver").value(f.driver).key("entry").value(f.entry).end_object();
    }
    w.end_array().key("left_out").begin_array();
    for (const EarlyLeftOut& l : set.left_out) {
        w.begin_object().key("address");
        if (l.address)
            w.value(l.address->str());
        else
            w.null();
        w.key("entry").value(l.entry).key("why").value(l.why).end_object();
    }
    w.end_array();
}

// The scalar `key` of map n; throws (as yaml-cpp does) what parse_record reports.
std::string text(const YAML::Node& n, const char* key) {
    YAML::Node v = n[key];
    if (!v || !v.IsScalar())
        throw std::runtime_error(std::string("\"") + key + "\" is missing or not a string");
    return v.as<std::string>();
}

uint16_t hex_id(const YAML::Node& n, const char* key) {
    std::string s = text(n, key);
    auto v = parse_hex_attr("0x" + s, 4);
    if (s.size() != 4 || !v)
        throw std::runtime_error(std::string("\"") + key + "\" is not 4 hex digits");
    return static_cast<uint16_t>(*v);
}

PciAddress address(const std::string& s) {
    auto a = PciAddress::parse(s);
    if (!a)
        throw std::runtime_error("\"" + s + "\" is not a PCI address");
    return *a;
}

const YAML::Node list(const YAML::Node& n, const char* key) {
    YAML::Node v = n[key];
    if (!v || !v.IsSequence())
        throw std::runtime_error(std::string("\"") + key + "\" is missing or not a list");
    return v;
}

bool same_functions(const std::vector<EarlyFunction>& a, const std::vector<EarlyFunction>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
        return x.address == y.address && x.vendor == y.vendor && x.device == y.device &&
               x.driver == y.driver;
    });
}

// " 0000:01:00.0 0000:01:00.1", or `none`.
std::string addresses(const std::vector<EarlyFunction>& fns, const char* none) {
    std::string out;
    for (const EarlyFunction& f : fns)
        out += " " + f.address.str();
    return out.empty() ? none : out;
}

}  // namespace

std::string record_json(const InitramfsRecord& r) {
    JsonWriter w;
    w.begin_object().key("kernel").value(r.kernel).key("built").value(r.built);
    w.key("host_checked").value(r.host_check_note.empty()).key("host_check_note");
    if (r.host_check_note.empty())
        w.null();
    else
        w.value(r.host_check_note);
    w.key("config_digest").value(r.config_digest).key("config_files").begin_array();
    for (const auto& f : r.config_files)
        w.value(f);
    w.end_array();
    write_set(w, r.set);
    return w.end_object().str();
}

std::optional<InitramfsRecord> parse_record(std::string_view data, std::string* err) {
    try {
        YAML::Node n = YAML::Load(std::string(data));
        if (!n.IsMap())
            throw std::runtime_error("not a JSON object");
        InitramfsRecord r;
        r.kernel = text(n, "kernel");
        if (!valid_kernel_version(r.kernel))
            throw std::runtime_error("\"kernel\" is not a kernel version");
        r.built = text(n, "built");
        r.config_digest = text(n, "config_digest");
        if (YAML::Node note = n["host_check_note"]; note && !note.IsNull())
            r.host_check_note = text(n, "host_check_note");
        r.set.host_checked = r.host_check_note.empty();
        for (const auto& f : list(n, "config_files"))
            r.config_files.push_back(f.as<std::string>());
        for (const auto& c : list(n, "carried"))
            r.set.carried.push_back({address(text(c, "address")), hex_id(c, "vendor"),
                                     hex_id(c, "device"), text(c, "driver"), text(c, "entry")});
        for (const auto& l : list(n, "left_out")) {
            EarlyLeftOut out{std::nullopt, text(l, "entry"), text(l, "why")};
            if (l["address"] && !l["address"].IsNull())
                out.address = address(text(l, "address"));
            r.set.left_out.push_back(std::move(out));
        }
        return r;
    } catch (const std::exception& e) {
        *err = e.what();
        return std::nullopt;
    }
}

std::string running_kernel() {
    struct utsname u;
    return ::uname(&u) == 0 ? u.release : "";
}

bool valid_kernel_version(std::string_view v) {
    if (v.empty() || v.size() > 128 || v == "." || v == "..")
        return false;
    return std::all_of(v.begin(), v.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '+' || c == '~' || c == '-';
    });
}

std::string image_build_reason(const std::string& root) {
    if (root != "/")
        return "";
    struct stat self, init, any;
    if (::stat("/proc/1", &any) != 0)
        return "/proc is not mounted";
    if (::stat("/sys/bus/pci", &any) != 0)
        return "/sys is not mounted";
    // PID 1's root is readable by root only; the hooks run as root, a user's dry run is live.
    if (::stat("/", &self) == 0 && ::stat("/proc/1/root/", &init) == 0 &&
        (self.st_dev != init.st_dev || self.st_ino != init.st_ino))
        return "a chroot: / is not PID 1's root";
    for (const char* marker : {"/run/systemd/container", "/run/.containerenv", "/.dockerenv"})
        if (::stat(marker, &any) == 0)
            return std::string("a container (") + marker + ")";
    return "";
}

std::vector<InitramfsRecord> read_records(const HostFs& fs, std::vector<std::string>* warnings) {
    std::vector<InitramfsRecord> out;
    int err = 0;
    Fd dir = fs.open_own_dir(kInitramfsRecordDir, false, &err);
    if (dir.get() < 0)
        return out;
    for (const auto& name : HostFs::list_own(dir.get())) {
        std::string_view n = name;
        if (n.size() <= kRecordPrefix.size() + kRecordSuffix.size() ||
            !n.starts_with(kRecordPrefix) || !n.ends_with(kRecordSuffix))
            continue;
        const std::string shown = std::string(kInitramfsRecordDir) + "/" + name;
        std::string why, perr;
        auto data = HostFs::read_own(dir.get(), name, kMaxRecordBytes, &why);
        if (!data) {
            warnings->push_back(shown + ": cannot read" + (why.empty() ? "" : ": " + why));
        } else if (auto r = parse_record(*data, &perr)) {
            if (n.substr(kRecordPrefix.size(), n.size() - kRecordPrefix.size() -
                                                    kRecordSuffix.size()) == r->kernel)
                out.push_back(std::move(*r));
            else
                warnings->push_back(shown + ": names kernel " + r->kernel);
        } else {
            warnings->push_back(shown + ": not a vfiod initramfs record: " + perr);
        }
    }
    return out;
}

RecordCheck check_record(const InitramfsRecord& r, const std::string& digest,
                         const EarlySet& now) {
    RecordCheck c;
    c.config_changed = r.config_digest != digest;
    c.differs = !same_functions(r.set.carried, now.carried);
    if (c.config_changed || c.differs)
        c.advice = "run update-initramfs -u -k " + r.kernel + " (dracut: dracut -f --kver " +
                   r.kernel + ")";
    return c;
}

InitramfsSummary summarize_initramfs(const HostFs& fs, const Config& config, const Plan& plan,
                                     std::vector<std::string>* warnings) {
    InitramfsSummary sum;
    const std::vector<InitramfsRecord> records = read_records(fs, warnings);
    const bool early = has_early_entries(config);
    // A host without early entries whose images carry nothing (the hook records every image
    // it builds) has nothing to hear about.
    sum.shown = early || std::any_of(records.begin(), records.end(), [](const auto& r) {
        return !r.set.carried.empty();
    });
    const std::string digest = early_config_digest(config);
    const EarlySet live = early_from_plan(config, plan);
    const EarlySet image = early_from_config(config);
    for (const InitramfsRecord& r : records) {
        const EarlySet& now = r.set.host_checked ? live : image;
        RecordCheck c = check_record(r, digest, now);
        sum.lines.push_back(
            "initramfs " + r.kernel + " (built " + r.built + ", " +
            (r.set.host_checked ? "host-use check done" : "host-use check not possible") +
            "): carries" + addresses(r.set.carried, " no early function") +
            (r.set.left_out.empty() ? ""
                                    : "; left out " + std::to_string(r.set.left_out.size())));
        if (c.advice.empty())
            continue;
        sum.ok = false;
        sum.lines.push_back(std::string("  out of date: ") +
                            (c.config_changed ? "the configuration changed since it was built"
                                              : "the host changed since it was built") +
                            (c.differs ? "; it would now carry" + addresses(now.carried, " none")
                                       : "") +
                            ": " + c.advice);
    }
    const std::string running = fs.live() ? running_kernel() : "";
    if (early && !running.empty() &&
        std::none_of(records.begin(), records.end(),
                     [&](const InitramfsRecord& r) { return r.kernel == running; }))
        sum.lines.push_back("initramfs " + running +
                            " (running): no record, so its initramfs carries no early entry; if "
                            "it loads the host driver of an early device, run "
                            "update-initramfs -u (or dracut -f)");
    return sum;
}

}  // namespace vfiod::cli
