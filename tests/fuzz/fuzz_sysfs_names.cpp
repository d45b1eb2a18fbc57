// Any sysfs name or link target (issue 10): a driver directory, a netdev, a block device, a junk
// entry in sys/bus/pci/devices, and a mount point in mountinfo, made of the fuzzer's bytes, in a
// small host tree read the way vfiod and vfioctl read it. Every human-facing output (warnings,
// plan details) is printable and valid UTF-8, the plan JSON is valid UTF-8, every string the
// daemon would publish on D-Bus is valid UTF-8, and the driver name itself is kept as it is.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "fuzz_check.hpp"
#include "io/snapshot.hpp"
#include "service/inventory.hpp"

using namespace vfiod;
namespace fz = vfiod::fuzz;
namespace fs = std::filesystem;

namespace {

const char* kBdf = "0000:00:01.0";

// A name the filesystem takes: no '/', no NUL, not "." or "..", at most 200 bytes.
std::string file_name(std::string_view s, const char* fallback) {
    std::string n(s.substr(0, 200));
    for (char& c : n)
        if (c == '/' || c == '\0')
            c = '_';
    if (n.empty() || n == "." || n == "..")
        return fallback;
    return n;
}

void put(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

void link(const fs::path& p, const std::string& target) {
    fs::create_directories(p.parent_path());
    fs::create_symlink(target, p);
}

const fs::path& root() {
    static const fs::path r = [] {
        std::string tmpl = (fs::temp_directory_path() / "fuzz-sysfs-names.XXXXXX").string();
        FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
        std::atexit([] { fs::remove_all(root()); });
        return fs::path(tmpl);
    }();
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Fields separated by NUL: driver, netdev, block device, junk entry, mount point.
    std::vector<std::string_view> f;
    std::string_view in = vfiod::fuzz::text(data, size);
    for (size_t i = 0; f.size() < 4;) {
        size_t nul = in.find('\0', i);
        f.push_back(in.substr(i, nul == std::string_view::npos ? std::string_view::npos : nul - i));
        if (nul == std::string_view::npos) {
            i = in.size();
            while (f.size() < 5)
                f.push_back({});
            break;
        }
        i = nul + 1;
        if (f.size() == 4)
            f.push_back(in.substr(i));
    }
    const std::string driver = file_name(f[0], "drv"), nic = file_name(f[1], "eth0"),
                      disk = file_name(f[2], "sda"), junk = file_name(f[3], "junk");
    std::string mount_point(f[4].substr(0, 512));
    for (char& c : mount_point)
        if (c == '\n' || c == ' ' || c == '\t' || c == '\0')
            c = '_';  // one mountinfo field; its octal escapes ("\012") are the parser's to decode

    const fs::path& r = root();
    fs::remove_all(r / "sys");
    fs::remove_all(r / "proc");
    const std::string dev = "/sys/devices/pci0000:00/" + std::string(kBdf);
    const fs::path d = r / dev.substr(1);
    put(d / "vendor", "0x10de\n");
    put(d / "device", "0x2331\n");
    put(d / "class", "0x030200\n");
    put(d / "driver_override", "(null)\n");
    put(d / "numa_node", "0\n");
    fs::create_directories(r / "sys/bus/pci/drivers" / driver);
    link(d / "driver", "/sys/bus/pci/drivers/" + driver);
    link(d / "iommu_group", "/sys/kernel/iommu_groups/13");
    link(r / "sys/kernel/iommu_groups/13/devices" / kBdf, dev);
    link(r / "sys/bus/pci/devices" / kBdf, dev);
    if (junk != kBdf)
        put(r / "sys/bus/pci/devices" / junk, "");
    fs::create_directories(r / "sys/class/iommu/dmar0");
    fs::create_directories(d / "net" / nic);
    link(r / "sys/class/net" / nic, dev + "/net/" + nic);
    put(d / "block" / disk / "dev", "8:0\n");
    link(r / "sys/class/block" / disk, dev + "/block/" + disk);
    put(r / "proc/self/mountinfo", "27 1 8:0 / " + mount_point + " rw - ext4 /dev/sda rw\n");
    put(r / "proc/net/route", "Iface\tDestination\tGateway\tFlags\n" + nic + "\t00000000\t0\t1\n");

    KernelHostFs host(r.string());
    Snapshot snap = read_snapshot(host);
    for (const auto& w : snap.warnings)
        FUZZ_CHECK(fz::printable(w));
    const PciFunction* fn = snap.topology.find(*PciAddress::parse(kBdf));
    FUZZ_CHECK(fn != nullptr);
    FUZZ_CHECK(fn->driver == driver);  // the real bytes: a release must find this driver again

    Config config;
    DeviceEntry e;
    e.selector = Selector{0x10de, std::nullopt};
    e.resource_name = "nvidia.com/GPU";
    config.devices.push_back(e);
    Plan plan = make_plan(snap.topology, snap.use, config);
    for (const auto& w : plan.warnings)
        FUZZ_CHECK(fz::printable(w));
    Inventory inv;
    for (const auto& g : plan.groups) {
        for (const auto& why : g.details)
            FUZZ_CHECK(fz::printable(why));
        for (const auto& pd : g.devices) {
            DeviceInfo di;
            static_cast<DeviceRecord&>(di) = pd;  // as the publisher builds it
            di.original_driver = pd.driver;
            inv.devices.emplace(pd.address, di);
        }
    }
    FUZZ_CHECK(fz::valid_utf8(plan_to_json(plan)));
    FUZZ_CHECK(fz::printable(vfiod::printable(driver, 4096)));

    // What DbusObjects::publish puts on the bus.
    const Inventory out = publishable(inv);
    FUZZ_CHECK(fz::valid_utf8(out.mode));
    for (const auto& [a, di] : out.devices) {
        FUZZ_CHECK(fz::valid_utf8(di.driver) && fz::valid_utf8(di.original_driver) &&
                   fz::valid_utf8(di.resource_name.value_or("")) &&
                   fz::valid_utf8(di.target.value_or("")));
        FUZZ_CHECK(fz::valid_utf8(driver) ? di.driver == driver : di.driver != driver);
    }
    return 0;
}
