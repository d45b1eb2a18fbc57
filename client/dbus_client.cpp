#include "dbus_client.hpp"

#include <map>
#include <tuple>

#include <sdbus-c++/sdbus-c++.h>

#include "core/mdev.hpp"
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

// The property `key` into *out when the signal or read carries it; an odd value reads as T{}.
template <typename T>
bool take(const Properties& p, const char* key, T* out) {
    if (!p.count(key))
        return false;
    *out = get<T>(p, key);
    return true;
}

}  // namespace

// Decodes vfiod's objects into an Inventory: a whole read's, or the properties one signal
// carries (only those change).
struct InventoryEditor {
    // Reason and Blockers, which groups and PFs publish alike.
    static void reason_and_blockers(const Properties& p, Reason* reason,
                                    std::vector<std::string>* details,
                                    std::vector<PciAddress>* blockers) {
        std::string text;
        if (take(p, "Reason", &text)) {
            *reason = parse_reason(text).value_or(Reason::None);
            details->clear();
            if (!parse_reason(text))  // a newer daemon's reason: show it as it came
                details->push_back(text);
        }
        std::vector<std::string> list;
        if (take(p, "Blockers", &list)) {
            blockers->clear();
            for (const auto& b : list)
                if (auto a = PciAddress::parse(b))
                    blockers->push_back(*a);
        }
    }

    static void health(Health* h, const Properties& p) {
        take(p, "Health", &h->state);
        take(p, "HealthReason", &h->reason);
    }

    static void device(Inventory::DeviceEntry* e, const Properties& p) {
        health(&e->health, p);
        DeviceRecord* d = &e->record;
        std::string s;
        if (take(p, "Address", &s))
            d->address = PciAddress::parse(s).value_or(PciAddress{});
        if (take(p, "Vendor", &s))
            d->vendor = static_cast<uint16_t>(parse_hex(s));
        if (take(p, "Device", &s))
            d->device = static_cast<uint16_t>(parse_hex(s));
        if (take(p, "Class", &s))
            d->class_code = parse_hex(s);
        take(p, "Driver", &d->driver);
        if (p.count("NumaNode"))
            d->numa_node = get<int32_t>(p, "NumaNode", -1);
        if (take(p, "Role", &s))
            // A role this build does not know is never offered: read as a companion.
            d->role = parse_role(s).value_or(Role::Companion);
        if (take(p, "Target", &s))
            d->target = std::move(s);
        if (take(p, "ResourceName", &s))
            d->resource_name = s.empty() ? std::nullopt : std::optional(s);
    }

    static void group(Inventory::GroupRecord* r, const Properties& p) {
        DaemonGroup& g = r->group;
        if (take(p, "State", &g.state))
            g.state_value = parse_group_state(g.state);
        uint32_t id = 0;
        if (take(p, "Id", &id))
            g.plan.group = id;
        take(p, "VfioPath", &g.vfio_path);
        take(p, "Health", &g.health);
        reason_and_blockers(p, &g.plan.reason, &g.plan.details, &g.plan.blockers);
        std::vector<sdbus::ObjectPath> devices;
        if (take(p, "Devices", &devices))
            r->devices.assign(devices.begin(), devices.end());
    }

    static void pf(DaemonPf* r, const Properties& p) {
        std::string s;
        if (take(p, "Address", &s))
            r->plan.address = PciAddress::parse(s).value_or(PciAddress{});
        take(p, "TotalVfs", &r->plan.total_vfs);
        take(p, "NumVfs", &r->plan.num_vfs);
        take(p, "WantedVfs", &r->plan.wanted_vfs);
        if (take(p, "State", &r->state))
            r->state_value = parse_pf_state(r->state);
        reason_and_blockers(p, &r->plan.reason, &r->plan.details, &r->plan.blockers);
    }

    static void mdev(DaemonMdev* r, const Properties& p) {
        health(&r->health, p);
        take(p, "Uuid", &r->plan.uuid);
        take(p, "Parent", &r->plan.parent);
        take(p, "Type", &r->plan.type);
        take(p, "TypeName", &r->plan.type_name);
        take(p, "ResourceName", &r->plan.resource_name);
        // IommuGroup is 0 while there is none: VfioPath tells (view() drops it then).
        if (uint32_t group = 0; take(p, "IommuGroup", &group))
            r->plan.group = group;
        take(p, "VfioPath", &r->vfio_path);
        if (p.count("NumaNode"))
            r->numa_node = get<int32_t>(p, "NumaNode", -1);
        if (take(p, "State", &r->state))
            r->state_value = parse_mdev_state(r->state);
        if (std::string text; take(p, "Reason", &text)) {
            r->plan.reason = parse_reason(text).value_or(Reason::None);
            r->plan.details.clear();
            if (!parse_reason(text))
                r->plan.details.push_back(text);
        }
        take(p, "Blockers", &r->plan.blockers);
    }

    static void manager(Inventory* inv, const Properties& p) {
        take(p, "Version", &inv->version_);
        take(p, "Mode", &inv->mode_);
        take(p, "IommuEnabled", &inv->iommu_);
    }

    // An object's interfaces as a whole read or InterfacesAdded carries them.
    static void add(Inventory* inv, const std::string& path, const Interfaces& ifaces) {
        if (auto it = ifaces.find("org.vfiod1.Group"); it != ifaces.end()) {
            Inventory::GroupRecord r;
            r.group.plan.group = 0u;
            group(&r, it->second);
            inv->groups_[path] = std::move(r);
            ++inv->decoded_;
        }
        if (auto it = ifaces.find("org.vfiod1.Device"); it != ifaces.end()) {
            Inventory::DeviceEntry r;
            r.record.target = std::string();  // a function published without Target moves to ""
            device(&r, it->second);
            inv->devices_[path] = std::move(r);
            ++inv->decoded_;
        }
        if (auto it = ifaces.find("org.vfiod1.PhysicalFunction"); it != ifaces.end()) {
            DaemonPf r;
            pf(&r, it->second);
            inv->pfs_[path] = std::move(r);
            ++inv->decoded_;
        }
        if (auto it = ifaces.find("org.vfiod1.MediatedDevice"); it != ifaces.end()) {
            DaemonMdev r;
            mdev(&r, it->second);
            inv->mdevs_[path] = std::move(r);
            ++inv->decoded_;
        }
    }

    static Inventory whole(const ManagedObjects& objects, const Properties& mgr) {
        Inventory inv;
        manager(&inv, mgr);
        for (const auto& [path, ifaces] : objects)
            add(&inv, path, ifaces);
        return inv;
    }

    // PropertiesChanged with its values: false for one that invalidates, or an unknown object.
    static bool changed(Inventory* inv, const std::string& path, const std::string& iface,
                        const Properties& values, const std::vector<std::string>& invalidated) {
        if (!invalidated.empty())
            return false;
        if (iface == "org.vfiod1.Manager") {
            manager(inv, values);
            return true;
        }
        if (iface == "org.vfiod1.Group") {
            auto it = inv->groups_.find(path);
            if (it == inv->groups_.end())
                return false;
            group(&it->second, values);
        } else if (iface == "org.vfiod1.Device") {
            auto it = inv->devices_.find(path);
            if (it == inv->devices_.end())
                return false;
            device(&it->second, values);
        } else if (iface == "org.vfiod1.PhysicalFunction") {
            auto it = inv->pfs_.find(path);
            if (it == inv->pfs_.end())
                return false;
            pf(&it->second, values);
        } else if (iface == "org.vfiod1.MediatedDevice") {
            auto it = inv->mdevs_.find(path);
            if (it == inv->mdevs_.end())
                return false;
            mdev(&it->second, values);
        }
        ++inv->decoded_;
        return true;
    }

    // InterfacesRemoved: each object it names counts as decoded, as a change's does.
    static void removed(Inventory* inv, const std::string& path,
                        const std::vector<std::string>& ifaces) {
        for (const auto& i : ifaces)
            if (i == "org.vfiod1.Group")
                inv->decoded_ += inv->groups_.erase(path);
            else if (i == "org.vfiod1.Device")
                inv->decoded_ += inv->devices_.erase(path);
            else if (i == "org.vfiod1.PhysicalFunction")
                inv->decoded_ += inv->pfs_.erase(path);
            else if (i == "org.vfiod1.MediatedDevice")
                inv->decoded_ += inv->mdevs_.erase(path);
    }
};

bool Inventory::apply(sdbus::Message& m) {
    try {
        const std::string member = m.getMemberName();
        if (member == "PropertiesChanged") {
            std::string iface;
            Properties values;
            std::vector<std::string> invalidated;
            m >> iface >> values >> invalidated;
            return InventoryEditor::changed(this, m.getPath(), iface, values, invalidated);
        }
        sdbus::ObjectPath path;
        if (member == "InterfacesAdded") {
            Interfaces ifaces;
            m >> path >> ifaces;
            InventoryEditor::add(this, path, ifaces);
            return true;
        }
        if (member == "InterfacesRemoved") {
            std::vector<std::string> ifaces;
            m >> path >> ifaces;
            InventoryEditor::removed(this, path, ifaces);
            return true;
        }
    } catch (const sdbus::Error&) {
        // Not what vfiod sends: only a whole read says what the inventory is now.
    }
    return false;
}

namespace {

// DESIGN §12's order as far as the objects tell it: foreign last, then by parent, type (by name:
// the config's order is not published), vfiod's index (its UUID's), then UUID. The index comes
// from the process's bounded table of made UUIDs (OwnMdevUuids::shared()): a consumer asks for
// the view on every signal, and a pair's UUIDs are made once while it stays among the recent.
std::vector<DaemonMdev> mdev_order(const std::map<std::string, DaemonMdev>& mdevs) {
    OwnMdevUuids& own = OwnMdevUuids::shared();
    using Key = std::tuple<bool, std::string, std::string, unsigned, std::string>;
    std::map<Key, const DaemonMdev*> sorted;
    for (const auto& [path, r] : mdevs) {
        const MdevPlan& p = r.plan;
        const bool foreign = r.state_value == MdevState::Foreign;
        auto index = foreign ? std::nullopt : own.index_of(p.parent, p.type, p.uuid);
        sorted.emplace(Key{foreign, p.parent, p.type, index.value_or(0), p.uuid}, &r);
    }
    std::vector<DaemonMdev> out;
    out.reserve(sorted.size());
    for (const auto& [key, r] : sorted) {
        out.push_back(*r);
        if (r->vfio_path.empty())
            out.back().plan.group.reset();
    }
    return out;
}

}  // namespace

DaemonView Inventory::view() const {
    DaemonView view{version_, mode_, iommu_, {}};
    std::map<unsigned, const GroupRecord*> by_number;
    for (const auto& [path, r] : groups_)
        by_number[r.group.plan.group.value_or(0)] = &r;
    view.groups.reserve(by_number.size());
    for (const auto& [id, r] : by_number) {
        DaemonGroup g = r->group;
        for (const auto& dp : r->devices) {
            auto d = devices_.find(dp);
            if (d == devices_.end())
                continue;
            PlannedDevice pd;
            static_cast<DeviceRecord&>(pd) = d->second.record;
            // Target is what the daemon moves a function to (vfio-pci or a variant driver); a
            // bridge stays with the host, as in the planner's record.
            if (pd.role == Role::Bridge)
                pd.target.reset();
            g.device_health[pd.address] = d->second.health;
            g.plan.devices.push_back(std::move(pd));
        }
        view.groups.push_back(std::move(g));
    }
    if (!pfs_.empty()) {
        std::map<PciAddress, const DaemonPf*> by_address;
        for (const auto& [path, r] : pfs_)
            by_address[r.plan.address] = &r;
        view.pfs.emplace();
        for (const auto& [a, r] : by_address)
            view.pfs->push_back(*r);
    }
    if (!mdevs_.empty())
        view.mdevs = mdev_order(mdevs_);
    return view;
}

namespace {

// The view out of GetManagedObjects and the Manager's properties; odd values read as defaults.
DaemonView view_from(const ManagedObjects& objects, const Properties& manager) {
    return InventoryEditor::whole(objects, manager).view();
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
        finish({}, InventoryEditor::whole(read_->objects, manager));
    } catch (const sdbus::Error& e) {
        finish({Code::Failed, "vfiod's answer is no inventory: " + e.getMessage()});
    }
}

// The read is over, and its decoded objects freed, before `done` runs: `done` may look at
// busy() or trim the heap.
void ViewReader::finish(const ClientResult& result, Inventory&& inventory) {
    if (!read_)
        return;
    Done done = std::move(read_->done);
    read_.reset();
    done(result, std::move(inventory));
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

std::shared_ptr<Watch> watch_inventory(sdbus::IConnection& bus,
                                       std::function<void(sdbus::Message&)> changed,
                                       std::function<void(bool owner)> owner_changed) {
    auto w = std::make_shared<Watch>();
    auto on_change = [changed](sdbus::Message& m) { changed(m); };
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
