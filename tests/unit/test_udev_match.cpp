// The udev rule's helper (app/udev_match): the planner's rule on the topology reader's view
// of one function, so what binds early is exactly what the daemon would bind.
#include <gtest/gtest.h>

#include "app/udev_match.hpp"
#include "core/config.hpp"
#include "fake_tree.hpp"
#include "io/host_fs.hpp"

namespace vfiod::test {
namespace {

PciAddress A(const char* s) { return *PciAddress::parse(s); }

DeviceEntry entry(uint16_t vendor, std::optional<uint16_t> device, bool early,
                  std::string driver = "vfio-pci") {
    DeviceEntry e;
    e.selector = Selector{vendor, device};
    e.early = early;
    e.driver = std::move(driver);
    return e;
}

class UdevMatch : public ::testing::Test {
protected:
    UdevMatch() {
        tree.enable_iommu();
        tree.add_function(FakeTree::pci("0000:00:1c.0", "8086", "a33c", "060400", "pcieport", 12));
        tree.add_function(FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "", 13,
                                        "0000:00:1c.0"));
        config.devices.push_back(entry(0x10de, 0x2331, true));
    }
    std::string match(const char* bdf) {
        KernelHostFs fs(tree.root());
        return udev_match(fs, config, A(bdf));
    }

    FakeTree tree;
    Config config;
};

TEST_F(UdevMatch, AnEarlyEntryInEnforceModeSetsTheDriver) {
    EXPECT_EQ(match("0000:01:00.0"), "VFIOD_ALLOWLISTED=1\nVFIOD_EARLY_DRIVER=vfio-pci\n");
    config.devices[0].driver = "nvgrace_gpu_vfio_pci";
    EXPECT_EQ(match("0000:01:00.0"),
              "VFIOD_ALLOWLISTED=1\nVFIOD_EARLY_DRIVER=nvgrace_gpu_vfio_pci\n");
}

TEST_F(UdevMatch, ObserveModeNeverWritesNotEvenEarly) {
    config.mode = Mode::Observe;
    EXPECT_EQ(match("0000:01:00.0"), "VFIOD_ALLOWLISTED=1\n");
}

TEST_F(UdevMatch, TheFirstMatchingEntryDecidesAsInThePlanner) {
    config.devices.insert(config.devices.begin(), entry(0x10de, std::nullopt, false));
    EXPECT_EQ(match("0000:01:00.0"), "VFIOD_ALLOWLISTED=1\n");
}

TEST_F(UdevMatch, ProtectedBridgesAndStrangersGetNothing) {
    ProtectEntry p;
    p.address = A("0000:01:00.0");
    config.protects.push_back(p);
    EXPECT_EQ(match("0000:01:00.0"), "");
    config.protects.clear();
    config.devices.push_back(entry(0x8086, std::nullopt, true));  // would cover the bridge
    EXPECT_EQ(match("0000:00:1c.0"), "") << "the planner never moves a bridge";
    EXPECT_EQ(match("0000:05:00.0"), "") << "no such function";
}

// sscanf("%4x") took " 10d" and "-10d"; the topology reader's parser takes neither, and a
// function the daemon would skip as unreadable must not be parked on an early override.
TEST_F(UdevMatch, IdsGoThroughTheTopologyReadersParser) {
    config.devices = {entry(0x010d, std::nullopt, true), entry(0xfef3, std::nullopt, true)};
    for (const char* vendor : {" 10d", "-10d", "10d ", "+10d"}) {
        tree.add_function(FakeTree::pci("0000:02:00.0", vendor, "0001", "020000", "", 14));
        EXPECT_EQ(match("0000:02:00.0"), "") << "vendor file '0x" << vendor << "'";
        tree.remove_function("0000:02:00.0");
    }
    tree.add_function(FakeTree::pci("0000:02:00.0", "010d", "0001", "020000", "", 14));
    EXPECT_EQ(match("0000:02:00.0"), "VFIOD_ALLOWLISTED=1\nVFIOD_EARLY_DRIVER=vfio-pci\n");
}

}  // namespace
}  // namespace vfiod::test
