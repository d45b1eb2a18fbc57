#include "dbus_client.hpp"

#include <map>

#include <sdbus-c++/sdbus-c++.h>

#include "io/proc_parsers.hpp"

namespace vfiod::client {

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

using Code = ClientResult::Code;

ClientResult from_error(const sdbus::Error& e, const std::string& what) {
    const std::string& name = e.getName();
    if (name == "org.freedesktop.DBus.Error.ServiceUnknown" ||
        name == "org.freedesktop.DBus.Error.NameHasNoOwner" ||
        name == "org.freedesktop.DBus.Error.NoServer" ||
        name == "org.freedesktop.DBus.Error.FileNotFound" || name == "sdbus.Error" ||
        name.rfind("System.Error.", 0) == 0)
        return {Code::Unavailable, kNotRunning + std::string(" [") + e.getMessage() + "]"};
    if (name == "org.freedesktop.DBus.Error.AccessDenied" ||
        name == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired")
        return {Code::Denied, what + ": permission denied (" + e.getMessage() + ").\n" + kHowToGrant};
    if (name == "org.freedesktop.DBus.Error.InvalidArgs")
        return {Code::InvalidArgs, what + ": " + e.getMessage()};
    std::string kind = name.rfind("org.vfiod1.Error.", 0) == 0 ? name.substr(17) : name;
    if (kind == "NotAllowlisted")
        return {Code::Failed, what + ": not in the allowlist: " + e.getMessage()};
    return {Code::Failed, what + ": " + kind + ": " + e.getMessage()};
}

// org.vfiod1's unique name, asked of the bus itself: GetNameOwner never activates a service.
std::optional<std::string> owner_of_name(sdbus::IConnection& bus) {
    auto dbus = sdbus::createProxy(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus");
    std::string owner;
    try {
        dbus->callMethod("GetNameOwner")
            .onInterface("org.freedesktop.DBus")
            .withArguments(std::string(kName))
            .storeResultsTo(owner);
    } catch (const sdbus::Error& e) {
        if (e.getName() == "org.freedesktop.DBus.Error.NameHasNoOwner")
            return std::nullopt;
        throw;
    }
    return owner;
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

PlannedDevice device_from(const Properties& p) {
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
    // Target is what the daemon moves the function to (vfio-pci or a variant driver).
    if (d.role != Role::Bridge)
        d.target = get<std::string>(p, "Target");
    std::string rn = get<std::string>(p, "ResourceName");
    if (!rn.empty())
        d.resource_name = rn;
    return d;
}

// The view out of GetManagedObjects and the Manager's properties; odd values read as defaults.
DaemonView view_from(const ManagedObjects& objects, const Properties& manager) {
    DaemonView view;
    view.version = get<std::string>(manager, "Version");
    view.mode = get<std::string>(manager, "Mode");
    view.iommu = get<bool>(manager, "IommuEnabled");

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
        dg.state_value = parse_group_state(dg.state);
        dg.plan.group = get<uint32_t>(g, "Id");
        dg.vfio_path = get<std::string>(g, "VfioPath");
        std::string reason = get<std::string>(g, "Reason");
        dg.plan.reason = parse_reason(reason).value_or(Reason::None);
        if (!parse_reason(reason))  // a newer daemon's reason: show it as it came
            dg.plan.details.push_back(reason);
        for (const auto& b : get<std::vector<std::string>>(g, "Blockers"))
            if (auto a = PciAddress::parse(b))
                dg.plan.blockers.push_back(*a);
        for (const auto& dp : get<std::vector<sdbus::ObjectPath>>(g, "Devices")) {
            auto d = devices.find(dp);
            if (d == devices.end())
                continue;
            dg.plan.devices.push_back(device_from(d->second));
            dg.numa_nodes[dg.plan.devices.back().address] = get<int32_t>(d->second, "NumaNode", -1);
        }
        groups[*dg.plan.group] = std::move(dg);
    }
    for (auto& [id, g] : groups)
        view.groups.push_back(std::move(g));
    return view;
}

}  // namespace

ClientResult fetch_view(sdbus::IConnection& bus, DaemonView* view) {
    try {
        std::optional<std::string> owner = owner_of_name(bus);
        if (!owner)
            return {Code::Unavailable, kNotRunning};
        // Addressed to the unique name: if vfiod leaves meanwhile the call fails instead of
        // starting it again.
        auto proxy = sdbus::createProxy(bus, *owner, "/org/vfiod1");
        ManagedObjects objects;
        proxy->callMethod("GetManagedObjects")
            .onInterface("org.freedesktop.DBus.ObjectManager")
            .storeResultsTo(objects);
        Properties manager;
        proxy->callMethod("GetAll")
            .onInterface("org.freedesktop.DBus.Properties")
            .withArguments(std::string("org.vfiod1.Manager"))
            .storeResultsTo(manager);
        *view = view_from(objects, manager);
        return {};
    } catch (const sdbus::Error& e) {
        return from_error(e, "status");
    }
}

ClientResult fetch_view(DaemonView* view) {
    try {
        auto bus = sdbus::createSystemBusConnection();
        return fetch_view(*bus, view);
    } catch (const sdbus::Error& e) {
        return from_error(e, "status");
    }
}

struct ViewReader::Read {
    Done done;
    sdbus::PendingAsyncCall call;  // the step in flight
    ManagedObjects objects;        // GetManagedObjects' answer, until GetAll's arrives
};

ViewReader::ViewReader(sdbus::IConnection& bus, std::chrono::milliseconds timeout)
    : bus_(bus), timeout_(timeout) {}

ViewReader::~ViewReader() { cancel(); }

void ViewReader::cancel() {
    if (read_)
        read_->call.cancel();
    read_.reset();
}

ClientResult ViewReader::start(Done done) {
    cancel();
    try {
        if (!bus_proxy_)
            bus_proxy_ = sdbus::createProxy(bus_, "org.freedesktop.DBus", "/org/freedesktop/DBus");
        // GetNameOwner never activates a service (DESIGN §9).
        auto call = bus_proxy_->createMethodCall("org.freedesktop.DBus", "GetNameOwner");
        call << std::string(kName);
        auto read = std::make_unique<Read>();
        read->done = std::move(done);
        read->call = bus_proxy_->callMethod(
            call, [this](sdbus::MethodReply& r, const sdbus::Error* e) { on_owner(r, e); },
            timeout_);
        read_ = std::move(read);
        return {};
    } catch (const sdbus::Error& e) {
        return from_error(e, "reading vfiod's inventory");
    }
}

namespace {

// A step's error as the reader reports it: NoReply is a timeout (or vfiod gone mid-call).
ClientResult read_error(const sdbus::Error& e) {
    if (e.getName() == "org.freedesktop.DBus.Error.NoReply")
        return {Code::Failed, "vfiod did not answer (" + e.getMessage() + ")"};
    return from_error(e, "reading vfiod's inventory");
}

}  // namespace

void ViewReader::on_owner(sdbus::MethodReply& reply, const sdbus::Error* error) {
    try {
        if (error) {
            finish(error->getName() == "org.freedesktop.DBus.Error.NameHasNoOwner"
                       ? ClientResult{Code::Unavailable, kNotRunning}
                       : read_error(*error));
            return;
        }
        std::string owner;
        reply >> owner;
        // Addressed to the unique name: if vfiod leaves meanwhile the call fails instead of
        // starting it again.
        if (!vfiod_ || owner != owner_) {
            vfiod_ = sdbus::createProxy(bus_, owner, "/org/vfiod1");
            owner_ = owner;
        }
        auto call = vfiod_->createMethodCall("org.freedesktop.DBus.ObjectManager",
                                             "GetManagedObjects");
        read_->call = vfiod_->callMethod(
            call, [this](sdbus::MethodReply& r, const sdbus::Error* e) { on_objects(r, e); },
            timeout_);
    } catch (const sdbus::Error& e) {
        finish(read_error(e));
    }
}

void ViewReader::on_objects(sdbus::MethodReply& reply, const sdbus::Error* error) {
    try {
        if (error) {
            finish(read_error(*error));
            return;
        }
        reply >> read_->objects;
        auto call = vfiod_->createMethodCall("org.freedesktop.DBus.Properties", "GetAll");
        call << std::string("org.vfiod1.Manager");
        read_->call = vfiod_->callMethod(
            call, [this](sdbus::MethodReply& r, const sdbus::Error* e) { on_manager(r, e); },
            timeout_);
    } catch (const sdbus::Error& e) {
        finish({Code::Failed, "vfiod's answer is no inventory: " + e.getMessage()});
    }
}

void ViewReader::on_manager(sdbus::MethodReply& reply, const sdbus::Error* error) {
    try {
        if (error) {
            finish(read_error(*error));
            return;
        }
        Properties manager;
        reply >> manager;
        finish({}, view_from(read_->objects, manager));
    } catch (const sdbus::Error& e) {
        finish({Code::Failed, "vfiod's answer is no inventory: " + e.getMessage()});
    }
}

// The read is over, and its decoded objects freed, before `done` runs: `done` may look at
// busy() or trim the heap.
void ViewReader::finish(const ClientResult& result, DaemonView&& view) {
    if (!read_)
        return;
    Done done = std::move(read_->done);
    read_.reset();
    done(result, std::move(view));
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
        return owner_of_name(*bus).has_value();
    } catch (const sdbus::Error&) {
        return false;
    }
}

struct Watch {
    std::vector<sdbus::Slot> slots;
};

std::shared_ptr<Watch> watch_inventory(sdbus::IConnection& bus, std::function<void()> changed,
                                       std::function<void(bool owner)> owner_changed) {
    auto w = std::make_shared<Watch>();
    auto on_change = [changed](sdbus::Message&) { changed(); };
    // sender= a well-known name: the bus matches it against the name's owner when it delivers.
    const std::string from = std::string("type='signal',sender='") + kName + "',";
    w->slots.push_back(bus.addMatch(from + "interface='org.freedesktop.DBus.Properties',"
                                           "member='PropertiesChanged',path_namespace='/org/vfiod1'",
                                    on_change));
    w->slots.push_back(bus.addMatch(from + "interface='org.freedesktop.DBus.ObjectManager',"
                                           "path='/org/vfiod1'",
                                    on_change));
    w->slots.push_back(bus.addMatch(
        "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
        "member='NameOwnerChanged',arg0='" + std::string(kName) + "'",
        [owner_changed](sdbus::Message& m) {
            std::string name, old_owner, new_owner;
            try {
                m >> name >> old_owner >> new_owner;
            } catch (const sdbus::Error&) {
                return;  // not the bus's signal after all: it names no owner
            }
            owner_changed(!new_owner.empty());
        }));
    return w;
}

}  // namespace vfiod::client
