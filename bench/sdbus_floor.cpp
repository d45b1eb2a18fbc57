// vfiod-bench-sdbus-floor GROUPS DEVICES: the floor for vfiod's GetManagedObjects (issue 25).
// Plain sd-bus and nothing of vfiod: it owns org.vfiod1 on the system bus named by
// DBUS_SYSTEM_BUS_ADDRESS and serves GROUPS org.vfiod1.Group and DEVICES org.vfiod1.Device
// objects under vfiod's prefixes, with the XML's property names and signatures and values of the
// lengths vfiod publishes for the fleet tree's VFs (observe mode: "pending", driver iavf), the
// way systemd serves its units: one fallback vtable per interface, a find callback that maps a
// path to its object, a node enumerator per prefix, and the object manager on /org/vfiod1 with
// the Manager's properties. Device j sits in group j+1; the devices past the last group are the
// last group's, as a GPU's audio function is its GPU's. Says READY=1 on NOTIFY_SOCKET once the
// name is owned, then serves until killed.
//
// The floor keeps no record per object: the find callback parses the path and hands the getters
// the object's index, and every value is formatted when it is asked for, as systemd formats a
// unit's path. What is left is sd-bus itself: the set of paths, the lookups per path and prefix,
// the serialisation of every property, and the bus.
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

constexpr const char kGroupPrefix[] = "/org/vfiod1/group";
constexpr const char kDevicePrefix[] = "/org/vfiod1/device";

unsigned long groups = 0, devices = 0;

// An object's index travels as the userdata sd-bus gives the getters: 1-based, so that it is
// never the null pointer.
void* as_userdata(unsigned long index) { return reinterpret_cast<void*>(index + 1); }
unsigned long index_of(void* userdata) { return reinterpret_cast<uintptr_t>(userdata) - 1; }

// Device j's address: VFs from bus 05 on, 256 functions a bus, as the fleet tree lays them out.
struct Address {
    unsigned domain, bus, slot, function;
};
Address address_of(unsigned long j) {
    unsigned long b = 5 + j / 256;
    return {static_cast<unsigned>(b >> 8), static_cast<unsigned>(b & 0xff),
            static_cast<unsigned>(j / 8 % 32), static_cast<unsigned>(j % 8)};
}
unsigned long group_of(unsigned long j) { return j < groups ? j + 1 : groups; }

// The object paths, formatted into `buf` (64 bytes), as sd-bus wants them: NUL-terminated.
const char* device_path(char* buf, unsigned long j) {
    Address a = address_of(j);
    std::snprintf(buf, 64, "%s/%04x_%02x_%02x_%x", kDevicePrefix, a.domain, a.bus, a.slot,
                  a.function);
    return buf;
}
const char* group_path(char* buf, unsigned long id) {
    std::snprintf(buf, 64, "%s/%lu", kGroupPrefix, id);
    return buf;
}

// The element after `prefix` + '/', or an empty view when `path` is not below it.
std::string_view element(const char* path, std::string_view prefix) {
    std::string_view p(path);
    if (p.size() <= prefix.size() + 1 || p.substr(0, prefix.size()) != prefix ||
        p[prefix.size()] != '/')
        return {};
    return p.substr(prefix.size() + 1);
}

// The hex number that is all of `s`.
bool hex(std::string_view s, unsigned& out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && end == s.data() + s.size();
}

int find_device(sd_bus*, const char* path, const char*, void*, void** found, sd_bus_error*) {
    std::string_view e = element(path, kDevicePrefix);  // DDDD_BB_SS_F
    unsigned d, b, s, f;
    if (e.size() != 12 || e[4] != '_' || e[7] != '_' || e[10] != '_' || !hex(e.substr(0, 4), d) ||
        !hex(e.substr(5, 2), b) || !hex(e.substr(8, 2), s) || !hex(e.substr(11, 1), f) ||
        s >= 32 || f >= 8)
        return 0;
    unsigned long bus = (static_cast<unsigned long>(d) << 8 | b);
    if (bus < 5)
        return 0;
    unsigned long j = (bus - 5) * 256 + s * 8 + f;
    if (j >= devices)
        return 0;
    *found = as_userdata(j);
    return 1;
}

int find_group(sd_bus*, const char* path, const char*, void*, void** found, sd_bus_error*) {
    std::string_view e = element(path, kGroupPrefix);
    unsigned long id = 0;
    auto [end, ec] = std::from_chars(e.data(), e.data() + e.size(), id);
    if (e.empty() || ec != std::errc() || end != e.data() + e.size() || id < 1 || id > groups)
        return 0;
    *found = as_userdata(id);
    return 1;
}

// Every path of one prefix, for an enumeration at or above it; none for one below it.
template <const char* (*path)(char*, unsigned long)>
int enumerate(const char* prefix, const char* own, unsigned long first, unsigned long n,
              char*** nodes) {
    std::string_view asked(prefix), mine(own);
    bool above = asked == "/" || asked == mine ||
                 (mine.substr(0, asked.size()) == asked && mine.size() > asked.size() &&
                  mine[asked.size()] == '/');
    char** out = static_cast<char**>(calloc(above ? n + 1 : 1, sizeof(char*)));
    if (!out)
        return -ENOMEM;
    *nodes = out;
    char buf[64];
    for (unsigned long i = 0; above && i < n; ++i)
        if (!(out[i] = strdup(path(buf, first + i))))
            return -ENOMEM;
    return 0;
}

int enumerate_devices(sd_bus*, const char* prefix, void*, char*** nodes, sd_bus_error*) {
    return enumerate<device_path>(prefix, kDevicePrefix, 0, devices, nodes);
}
int enumerate_groups(sd_bus*, const char* prefix, void*, char*** nodes, sd_bus_error*) {
    return enumerate<group_path>(prefix, kGroupPrefix, 1, groups, nodes);
}

// The getters. A string property of the fleet's VFs is the same text for every object; the rest
// is formatted from the index.
template <const char* text>
int get_text(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply, void*,
             sd_bus_error*) {
    return sd_bus_message_append_basic(reply, 's', text);
}
int no_texts(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply, void*,
             sd_bus_error*) {
    return sd_bus_message_append(reply, "as", 0);
}

int device_address(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                   void* userdata, sd_bus_error*) {
    Address a = address_of(index_of(userdata));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", a.domain, a.bus, a.slot, a.function);
    return sd_bus_message_append_basic(reply, 's', buf);
}
int device_group_id(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                    void* userdata, sd_bus_error*) {
    uint32_t id = static_cast<uint32_t>(group_of(index_of(userdata)));
    return sd_bus_message_append_basic(reply, 'u', &id);
}
int device_numa(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply, void*,
                sd_bus_error*) {
    int32_t node = -1;
    return sd_bus_message_append_basic(reply, 'i', &node);
}
int device_group(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                 void* userdata, sd_bus_error*) {
    char buf[64];
    return sd_bus_message_append_basic(reply, 'o', group_path(buf, group_of(index_of(userdata))));
}

int group_id(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
             void* userdata, sd_bus_error*) {
    uint32_t id = static_cast<uint32_t>(index_of(userdata));
    return sd_bus_message_append_basic(reply, 'u', &id);
}
int group_vfio_path(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                    void* userdata, sd_bus_error*) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "/dev/vfio/%lu", index_of(userdata));
    return sd_bus_message_append_basic(reply, 's', buf);
}
int group_devices(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                  void* userdata, sd_bus_error*) {
    unsigned long id = index_of(userdata);
    int r = sd_bus_message_open_container(reply, 'a', "o");
    char buf[64];
    for (unsigned long j = id - 1; r >= 0 && j < devices && (j == id - 1 || id == groups); ++j)
        r = sd_bus_message_append_basic(reply, 'o', device_path(buf, j));
    return r < 0 ? r : sd_bus_message_close_container(reply);
}

constexpr char kVendor[] = "8086", kDevice[] = "154c", kClass[] = "020000", kDriver[] = "iavf",
               kTarget[] = "vfio-pci", kResource[] = "intel.com/x710_vf", kRole[] = "allowlisted",
               kState[] = "pending", kNone[] = "", kVersion[] = "0.0.0", kMode[] = "observe";

constexpr uint64_t kConst = SD_BUS_VTABLE_PROPERTY_CONST;
constexpr uint64_t kChanges = SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE;

// In the order and with the flags of daemon/dbus/org.vfiod1.*.xml.
const sd_bus_vtable kDeviceVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Address", "s", device_address, 0, kConst),
    SD_BUS_PROPERTY("Vendor", "s", get_text<kVendor>, 0, kChanges),
    SD_BUS_PROPERTY("Device", "s", get_text<kDevice>, 0, kChanges),
    SD_BUS_PROPERTY("Class", "s", get_text<kClass>, 0, kChanges),
    SD_BUS_PROPERTY("Driver", "s", get_text<kDriver>, 0, kChanges),
    SD_BUS_PROPERTY("Target", "s", get_text<kTarget>, 0, kChanges),
    SD_BUS_PROPERTY("OriginalDriver", "s", get_text<kDriver>, 0, kChanges),
    SD_BUS_PROPERTY("IommuGroup", "u", device_group_id, 0, kChanges),
    SD_BUS_PROPERTY("NumaNode", "i", device_numa, 0, kChanges),
    SD_BUS_PROPERTY("ResourceName", "s", get_text<kResource>, 0, kChanges),
    SD_BUS_PROPERTY("Role", "s", get_text<kRole>, 0, kChanges),
    SD_BUS_PROPERTY("Group", "o", device_group, 0, kChanges),
    SD_BUS_VTABLE_END,
};

const sd_bus_vtable kGroupVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Id", "u", group_id, 0, kConst),
    SD_BUS_PROPERTY("State", "s", get_text<kState>, 0, kChanges),
    SD_BUS_PROPERTY("Reason", "s", get_text<kNone>, 0, kChanges),
    SD_BUS_PROPERTY("Blockers", "as", no_texts, 0, kChanges),
    SD_BUS_PROPERTY("VfioPath", "s", group_vfio_path, 0, kConst),
    SD_BUS_PROPERTY("Devices", "ao", group_devices, 0, kChanges),
    SD_BUS_VTABLE_END,
};

int get_iommu(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply, void*,
              sd_bus_error*) {
    int on = 1;
    return sd_bus_message_append_basic(reply, 'b', &on);
}

const sd_bus_vtable kManagerVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Version", "s", get_text<kVersion>, 0, kConst),
    SD_BUS_PROPERTY("Mode", "s", get_text<kMode>, 0, kChanges),
    SD_BUS_PROPERTY("IommuEnabled", "b", get_iommu, 0, kChanges),
    SD_BUS_VTABLE_END,
};

int fail(const char* what, int r) {
    std::fprintf(stderr, "vfiod-bench-sdbus-floor: %s: %s\n", what, std::strerror(-r));
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || (groups = std::strtoul(argv[1], nullptr, 10)) == 0 ||
        (devices = std::strtoul(argv[2], nullptr, 10)) < groups) {
        std::fprintf(stderr, "usage: vfiod-bench-sdbus-floor GROUPS DEVICES (DEVICES >= GROUPS > 0)\n");
        return 2;
    }
    sd_bus* bus = nullptr;
    int r = sd_bus_open_system(&bus);
    if (r < 0)
        return fail("sd_bus_open_system", r);
    struct {
        const char* what;
        int r;
    } steps[] = {
        {"the Manager's vtable",
         sd_bus_add_object_vtable(bus, nullptr, "/org/vfiod1", "org.vfiod1.Manager",
                                  kManagerVtable, nullptr)},
        {"the object manager", sd_bus_add_object_manager(bus, nullptr, "/org/vfiod1")},
        {"the groups' vtable", sd_bus_add_fallback_vtable(bus, nullptr, kGroupPrefix,
                                                          "org.vfiod1.Group", kGroupVtable,
                                                          find_group, nullptr)},
        {"the groups' enumerator",
         sd_bus_add_node_enumerator(bus, nullptr, kGroupPrefix, enumerate_groups, nullptr)},
        {"the devices' vtable", sd_bus_add_fallback_vtable(bus, nullptr, kDevicePrefix,
                                                           "org.vfiod1.Device", kDeviceVtable,
                                                           find_device, nullptr)},
        {"the devices' enumerator",
         sd_bus_add_node_enumerator(bus, nullptr, kDevicePrefix, enumerate_devices, nullptr)},
    };
    for (const auto& s : steps)
        if (s.r < 0)
            return fail(s.what, s.r);
    // vfiod-bench-daemon starts the floor as soon as vfiod has exited, and the bus may not have
    // seen vfiod's connection close yet: the name is released a moment later.
    for (int tries = 0; (r = sd_bus_request_name(bus, "org.vfiod1", 0)) == -EEXIST && tries < 500;
         ++tries)
        usleep(10'000);
    if (r < 0)
        return fail("the name org.vfiod1", r);
    sd_notify(0, "READY=1");
    for (;;) {
        r = sd_bus_process(bus, nullptr);
        if (r < 0)
            return fail("sd_bus_process", r);
        if (r == 0 && (r = sd_bus_wait(bus, UINT64_MAX)) < 0 && r != -EINTR)
            return fail("sd_bus_wait", r);
    }
}
