// [[mdev]] entries (DESIGN §12): what they parse to, and every bad input with its place.
#include <gtest/gtest.h>

#include <string>

#include "config_test_helpers.hpp"
#include "core/config.hpp"

namespace vfiod {
namespace {

using namespace vfiod::test;

std::string mdev(const std::string& lines) { return "[[mdev]]\n" + lines; }

TEST(ConfigMdev, EntriesParseInConfigOrderWithTheirDefaults) {
    auto c = Parsed(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 2\n") +
                    mdev("parent = \"0000:3b:00.0\"\ntype = \"nvidia-222\"\ncount = 0\n"
                         "resource_name = \"nvidia.com/GRID_T4-1Q\"\n") +
                    mdev("selector = \"10DE:1eb8\"\ntype = \"nvidia-223\"\ncount = 4096\n"));
    ASSERT_EQ(c.mdevs.size(), 3u);
    EXPECT_EQ(c.mdevs[0].parent, "mbochs");
    EXPECT_FALSE(c.mdevs[0].address);
    EXPECT_FALSE(c.mdevs[0].selector);
    EXPECT_EQ(c.mdevs[0].type, "mbochs-small");
    EXPECT_EQ(c.mdevs[0].count, 2u);
    EXPECT_EQ(c.mdevs[0].resource_name, "vfiod.io/mbochs-small");
    EXPECT_EQ(c.mdevs[0].origin.str(), "t.toml:1:1");
    EXPECT_EQ(c.mdevs[1].address->str(), "0000:3b:00.0");
    EXPECT_EQ(c.mdevs[1].count, 0u);
    EXPECT_EQ(c.mdevs[1].resource_name, "nvidia.com/GRID_T4-1Q");
    EXPECT_EQ(c.mdevs[2].selector->str(), "10de:1eb8");  // normalised, as in [[device]]
    EXPECT_EQ(c.mdevs[2].parent, "");
    EXPECT_EQ(c.mdevs[2].count, 4096u);
    const PciAddress a = *PciAddress::parse("0000:3b:00.0");
    EXPECT_TRUE(c.mdevs[1].matches(a, 0x10de, 0x1eb8));
    EXPECT_FALSE(c.mdevs[1].matches(*PciAddress::parse("0000:3b:00.1"), 0x10de, 0x1eb8));
    EXPECT_TRUE(c.mdevs[2].matches(a, 0x10de, 0x1eb8));
    EXPECT_FALSE(c.mdevs[2].matches(a, 0x10de, 0x1eb9));
    EXPECT_FALSE(c.mdevs[0].matches(a, 0x10de, 0x1eb8));  // a virtual parent is no function
}

// A type's bytes that a resource name cannot hold become '_' in the default name.
TEST(ConfigMdev, DefaultResourceNameReplacesBadCharacters) {
    auto c = Parsed(mdev("parent = \"mtty\"\ntype = \"mtty+2:x\"\ncount = 1\n"));
    ASSERT_EQ(c.mdevs.size(), 1u);
    EXPECT_EQ(c.mdevs[0].resource_name, "vfiod.io/mtty_2_x");
    EXPECT_TRUE(OneError(mdev("parent = \"mtty\"\ntype = \"-x\"\ncount = 1\n"), "3:8",
                         "mdev.type: the default resource name \"vfiod.io/-x\" of type \"-x\" is "
                         "invalid"));
}

TEST(ConfigMdev, UnknownKeysAndShapesAreRefused) {
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n"
                              "uuid = \"x\"\n"),
                         "5:1",
                         "unknown key \"uuid\" in [[mdev]]; expected parent, selector, type, "
                         "count or resource_name"));
    EXPECT_TRUE(OneError("[mdev]\nparent = \"mbochs\"\n", "1:1",
                         "mdev: expected an array of tables ([[mdev]]), got a table ([mdev])"));
    EXPECT_TRUE(OneError("[[mdevs]]\ncount = 1\n", "1:1",
                         "unknown table [[mdevs]]; expected [daemon], [[device]], [[protect]], "
                         "[[sriov]] or [[mdev]]"));
}

// A type is one directory name and part of the UUID text: no '/', no "..", no spaces.
TEST(ConfigMdev, BadTypesNameTheirPlace) {
    for (const char* t : {"../../../bus/pci/drivers/vfio-pci", "a/b", "..", "a..b", ".", "",
                          "nvidia 222", "nvidia\\t222"}) {
        EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"" + std::string(t) +
                                  "\"\ncount = 1\n"),
                             "3:8", "mdev.type: invalid type"))
            << t;
    }
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"" + std::string(256, 'a') +
                              "\"\ncount = 1\n"),
                         "3:8", "at most 255"));
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = 3\ncount = 1\n"), "3:8",
                         "mdev.type: expected a string, got an integer"));
}

TEST(ConfigMdev, CountIsBetweenZeroAnd4096) {
    for (const char* n : {"-1", "4097", "9223372036854775807"})
        EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = " +
                                  std::string(n) + "\n"),
                             "4:9", "mdev.count: " + std::string(n) +
                                        " is out of range; expected 0..4096"))
            << n;
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = \"2\"\n"),
                         "4:9", "mdev.count: expected an integer, got a string"));
}

TEST(ConfigMdev, BadOrMissingParentsNameTheirPlace) {
    struct Case {
        const char* lines;
        const char* at;
        const char* what;
    };
    const Case cases[] = {
        {"type = \"t\"\ncount = 1\n", "1:1", "[[mdev]] needs a parent or a selector"},
        {"parent = \"mbochs\"\ncount = 1\n", "1:1", "[[mdev]] needs a type"},
        {"parent = \"mbochs\"\ntype = \"t\"\n", "1:1", "[[mdev]] needs count"},
        {"parent = \"mbochs\"\nselector = \"10de:1eb8\"\ntype = \"t\"\ncount = 1\n", "2:10",
         "[[mdev]] names its parents by parent or by selector, not both"},
        {"parent = \"../mbochs\"\ntype = \"t\"\ncount = 1\n", "2:10",
         "mdev.parent: invalid parent \"../mbochs\""},
        {"parent = \"mb/ochs\"\ntype = \"t\"\ncount = 1\n", "2:10", "mdev.parent: invalid parent"},
        {"parent = \"..\"\ntype = \"t\"\ncount = 1\n", "2:10", "mdev.parent: invalid parent"},
        {"parent = \"\"\ntype = \"t\"\ncount = 1\n", "2:10", "the parent is empty"},
        {"parent = \"0000:3B:00.0\"\ntype = \"t\"\ncount = 1\n", "2:10", "mdev.parent: "},
        {"selector = \"10de\"\ntype = \"t\"\ncount = 1\n", "2:12",
         "mdev.selector: invalid selector \"10de\""},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(OneError(mdev(c.lines), c.at, c.what)) << c.lines;
}

// One entry per (parent, type): the same parent, the same selector, or a vendor's wildcard and
// one of its devices, whichever comes first.
TEST(ConfigMdev, TwoEntriesForOneParentAndTypeAreRefused) {
    const std::string small = mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n");
    EXPECT_TRUE(OneError(small + small, "5:1",
                         "[[mdev]] for type \"mbochs-small\" names parents that the entry at "
                         "t.toml:1:1 names for the same type"));
    auto sel = [](const char* s) {
        return mdev("selector = \"" + std::string(s) + "\"\ntype = \"nvidia-222\"\ncount = 1\n");
    };
    EXPECT_TRUE(OneError(sel("10de:1eb8") + sel("10DE:1EB8"), "5:1", "the entry at t.toml:1:1"));
    EXPECT_TRUE(OneError(sel("10de:1eb8") + sel("10de:*"), "5:1", "the entry at t.toml:1:1"));
    EXPECT_TRUE(OneError(sel("10de:*") + sel("10de:1eb8"), "5:1", "the entry at t.toml:1:1"));
    // Other types on one parent, one type on other parents: fine.
    auto c = Parsed(small + mdev("parent = \"mbochs\"\ntype = \"mbochs-large\"\ncount = 1\n") +
                    mdev("parent = \"mdpy\"\ntype = \"mbochs-small\"\ncount = 1\n") +
                    sel("10de:1eb8") + sel("10de:1eb9") + sel("1002:*"));
    EXPECT_EQ(c.mdevs.size(), 6u);
}

// A [[device]] entry that can only match parents of an [[mdev]] entry could only ever be refused
// mdev-parent: an error. One that merely can meet one is the planner's.
TEST(ConfigMdev, DeviceEntriesForMdevParentsAreRefused) {
    const std::string by_addr =
        mdev("parent = \"0000:3b:00.0\"\ntype = \"nvidia-222\"\ncount = 1\n");
    const std::string by_sel = mdev("selector = \"10de:1eb8\"\ntype = \"nvidia-222\"\ncount = 1\n");
    EXPECT_TRUE(OneError(by_addr + device("address", "\"0000:3b:00.0\""), "5:1",
                         "[[device]] can only match functions that the [[mdev]] entry at "
                         "t.toml:1:1 makes mediated devices on, and vfiod never binds an mdev "
                         "parent (mdev-parent)"));
    EXPECT_TRUE(OneError(device("selector", "\"10de:1eb8\"") + by_sel, "1:1",
                         "the [[mdev]] entry at t.toml:3:1"));
    EXPECT_TRUE(OneError(mdev("selector = \"10de:*\"\ntype = \"nvidia-222\"\ncount = 1\n") +
                             device("selector", "\"10de:1eb8\""),
                         "5:1", "(mdev-parent)"));
    // Functions the [[mdev]] entry may not name: another address, a wider selector, a virtual
    // parent's name.
    auto c = Parsed(by_addr + by_sel + device("address", "\"0000:3b:00.1\"") +
                    device("selector", "\"10de:*\"") + device("selector", "\"10de:1eb9\"") +
                    mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n"));
    EXPECT_EQ(c.mdevs.size(), 3u);
    EXPECT_EQ(c.devices.size(), 3u);
}

// A resource holds PCI functions or mdevs, not both; mdev names collide like device names.
TEST(ConfigMdev, ResourceNamesAreCheckedWithDeviceNames) {
    EXPECT_TRUE(OneError(device("selector", "\"10de:2331\"") +
                             "resource_name = \"vfiod.io/mbochs-small\"\n" +
                             mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n"),
                         "4:1",
                         "[[mdev]] resource_name \"vfiod.io/mbochs-small\" is also the [[device]] "
                         "entry's at t.toml:1:1: a resource holds PCI functions or mediated "
                         "devices, not both"));
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"a.b\"\ncount = 1\n") +
                             mdev("parent = \"mbochs\"\ntype = \"a_b\"\ncount = 1\n"),
                         "5:1",
                         "[[mdev]] resource_name \"vfiod.io/a_b\" collides with \"vfiod.io/a.b\""));
    // Case alone: one variable, KubeVirt's for vGPUs.
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"gpu\"\ncount = 1\n") +
                             mdev("parent = \"mbochs\"\ntype = \"GPU\"\ncount = 1\n"),
                         "5:1",
                         "both would be handed to the VM in the environment variable "
                         "MDEV_PCI_RESOURCE_VFIOD_IO_GPU"));
    EXPECT_TRUE(OneError(mdev("parent = \"mbochs\"\ntype = \"t\"\ncount = 1\n"
                              "resource_name = \"nvidia.com\"\n"),
                         "5:17", "mdev.resource_name: invalid resource name"));
}

TEST(ConfigMdev, EqualityFollowsWhatTheEntriesDo) {
    const std::string e = mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 2\n");
    auto a = Parsed(e);
    EXPECT_TRUE(a == Parsed("\n\n" + e));
    EXPECT_FALSE(a == Parsed(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n")));
    EXPECT_FALSE(a == Parsed(mdev("parent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 2\n"
                                  "resource_name = \"a.com/b\"\n")));
    EXPECT_FALSE(a == Config{});
}

}  // namespace
}  // namespace vfiod
