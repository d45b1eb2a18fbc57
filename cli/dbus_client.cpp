#include "dbus_client.hpp"

#include <map>

#include <sdbus-c++/sdbus-c++.h>

#include "commands.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod::cli {

namespace {

constexpr const char* kName = "org.vfiod1";
constexpr const char* kNotRunning =
    "vfiod is not running (no org.vfiod1 on the system bus); start it with "
    "'systemctl start vfiod', or use 'vfioctl plan' / 'status --offline' to read the host directly";

constexpr const char* kHowToGrant =
    "Run it as root, or have an administrator grant you the polkit action org.vfiod1.manage with "
    "a rules file: copy /usr/share/doc/vfiod/examples/50-vfiod.rules to /etc/polkit-1/rules.d/ "
    "and name a Unix group you are in (vfiod never prompts for a password).";

using Properties = std::map<std::string, sdbus::Variant>;
using Interfaces = std::map<std::string, Properties>;
using ManagedObjects = std::map<sdbus::ObjectPath, Interfaces>;

ClientResult from_error(const sdbus::Error& e, const std::string& what) {
    const std::string& name = e.getName();
    if (name == "org.freedesktop.DBus.Error.ServiceUnknown" ||
        name == "org.freedesktop.DBus.Error.NameHasNoOwner" ||
        name == "org.freedesktop.DBus.Error.NoServer" ||
        name == "org.freedesktop.DBus.Error.FileNotFound" || name == "sdbus.Error" ||
        name.rfind("System.Error.", 0) == 0)
        return {kExitUnavailable, kNotRunning + std::string(" [") + e.getMessage() + "]"};
    if (name == "org.freedesktop.DBus.Error.AccessDenied" ||
        name == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired")
        return {kExitDenied, what + ": permission denied (" + e.getMessage() + ").\n" + kHowToGrant};
    if (name == "org.freedesktop.DBus.Error.InvalidArgs")
        return {kExitUsage, what + ": " + e.getMessage()};
    std::string kind = name.rfind("org.vfiod1.Error.", 0) == 0 ? name.substr(17) : name;
    if (kind == "NotAllowlisted")
        return {kExitFailed, what + ": not in the allowlist: " + e.getMessage()};
    return {kExitFailed, what + ": " + kind + ": " + e.getMessage()};
}

template <typename T>
T get(const Properties& p, const char* key, T fallback = {}) {
    auto it = p.find(key);
    if (it == p.end())
        return fallback;
    try {
        return it->second.get<T>();
    } catch (const sdbus::Error&) {
        return fallback;
    }
}

// The daemon publishes ids as bare hex ("10de"); anything odd reads as 0 rather than throwing.
uint32_t parse_hex(const std::string& s) { return parse_hex_attr("0x" + s, 6).value_or(0); }

PlannedDevice device_from(const Properties& p, const std::string& state) {
    PlannedDevice d;
    d.address = PciAddress::parse(get<std::string>(p, "Address")).value_or(PciAddress{});
    d.vendor = static_cast<uint16_t>(parse_hex(get<std::string>(p, "Vendor")));
    d.device = static_cast<uint16_t>(parse_hex(get<std::string>(p, "Device")));
    d.class_code = parse_hex(get<std::string>(p, "Class"));
    d.driver = get<std::string>(p, "Driver");
    std::string role = get<std::string>(p, "Role");
    d.role = role == "allowlisted" ? Role::Allowlisted
             : role == "bridge"    ? Role::Bridge
                                   : Role::Companion;
    // The daemon publishes no target; a bound group's functions sit on theirs, the others
    // are headed for vfio-pci (variant drivers show once bound).
    if (d.role != Role::Bridge)
        d.target = state == "bound" && !d.driver.empty() ? d.driver : "vfio-pci";
    std::string rn = get<std::string>(p, "ResourceName");
    if (!rn.empty())
        d.resource_name = rn;
    return d;
}

}  // namespace

ClientResult fetch_view(DaemonView* view) {
    try {
        auto proxy = sdbus::createProxy(sdbus::createSystemBusConnection(), kName, "/org/vfiod1");
        ManagedObjects objects;
        proxy->callMethod("GetManagedObjects")
            .onInterface("org.freedesktop.DBus.ObjectManager")
            .storeResultsTo(objects);
        Properties manager;
        proxy->callMethod("GetAll")
            .onInterface("org.freedesktop.DBus.Properties")
            .withArguments(std::string("org.vfiod1.Manager"))
            .storeResultsTo(manager);
        view->version = get<std::string>(manager, "Version");
        view->mode = get<std::string>(manager, "Mode");
        view->iommu = get<bool>(manager, "IommuEnabled");

        std::map<std::string, Properties> devices;  // by object path
        for (const auto& [path, ifaces] : objects) {
            auto it = ifaces.find("org.vfiod1.Device");
            if (it != ifaces.end())
                devices[path] = it->second;
        }
        std::map<unsigned, DaemonGroup> groups;
        for (const auto& [path, ifaces] : objects) {
            auto it = ifaces.find("org.vfiod1.Group");
            if (it == ifaces.end())
                continue;
            const Properties& g = it->second;
            DaemonGroup dg;
            dg.state = get<std::string>(g, "State");
            dg.plan.group = get<uint32_t>(g, "Id");
            std::string reason = get<std::string>(g, "Reason");
            dg.plan.reason = parse_reason(reason).value_or(Reason::None);
            if (!parse_reason(reason))  // a newer daemon's reason: show it as it came
                dg.plan.details.push_back(reason);
            for (const auto& b : get<std::vector<std::string>>(g, "Blockers"))
                if (auto a = PciAddress::parse(b))
                    dg.plan.blockers.push_back(*a);
            for (const auto& dp : get<std::vector<sdbus::ObjectPath>>(g, "Devices")) {
                auto d = devices.find(dp);
                if (d != devices.end())
                    dg.plan.devices.push_back(device_from(d->second, dg.state));
            }
            groups[*dg.plan.group] = std::move(dg);
        }
        for (auto& [id, g] : groups)
            view->groups.push_back(std::move(g));
        return {};
    } catch (const sdbus::Error& e) {
        return from_error(e, "status");
    }
}

ClientResult call_group_method(const std::string& method, const std::string& address) {
    std::string what = method == "Bind" ? "bind " + address : "release " + address;
    try {
        auto connection = sdbus::createSystemBusConnection();
        // A bind moves every function of a group, each write bounded by the daemon's
        // write_timeout: allow for a slow group rather than D-Bus's 25 s default.
        connection->setMethodCallTimeout(std::chrono::minutes(2));
        auto proxy = sdbus::createProxy(std::move(connection), kName, "/org/vfiod1");
        proxy->callMethod(method).onInterface("org.vfiod1.Manager").withArguments(address);
        return {};
    } catch (const sdbus::Error& e) {
        return from_error(e, what);
    }
}

bool daemon_running() {
    try {
        auto bus = sdbus::createSystemBusConnection();
        auto proxy = sdbus::createProxy(*bus, "org.freedesktop.DBus", "/org/freedesktop/DBus");
        bool has = false;
        proxy->callMethod("NameHasOwner")
            .onInterface("org.freedesktop.DBus")
            .withArguments(std::string(kName))
            .storeResultsTo(has);
        return has;
    } catch (const sdbus::Error&) {
        return false;
    }
}

}  // namespace vfiod::cli
