// The mdev planner (DESIGN §12): each (parent, type) pair alone and all or nothing, in config
// order; vfiod's own mdevs removed only when not open; foreign ones never touched. Pure: hosts
// are built by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config_test_helpers.hpp"
#include "core/plan.hpp"
#include "core/plan_json.hpp"

namespace vfiod {
namespace {

using test::Parsed;

const std::string kForeign = "83b8f4f2-509f-482f-bc1e-e6bfe0fa1001";

std::string mdev(const std::string& parent, const std::string& type, unsigned count) {
    return "[[mdev]]\nparent = \"" + parent + "\"\ntype = \"" + type + "\"\ncount = " +
           std::to_string(count) + "\n";
}

// mbochs with its three types and mtty, `avail` each; no mdevs yet.
MdevHost samples(unsigned avail = 10) {
    MdevHost h;
    auto& mb = h.parents["mbochs"];
    mb.devpath = "sys/devices/virtual/mbochs/mbochs";
    for (const char* t : {"mbochs-small", "mbochs-medium", "mbochs-large"})
        mb.types[t] = MdevType{t, avail};
    auto& mt = h.parents["mtty"];
    mt.devpath = "sys/devices/virtual/mtty/mtty";
    mt.types["mtty-2"] = MdevType{"Dual port serial", avail};
    return h;
}

void add(MdevHost& h, const std::string& uuid, const std::string& parent, const std::string& type,
         unsigned group) {
    h.mdevs[uuid] = Mdev{parent, type, group, "mbochs"};
}

std::vector<MdevPlan> plan(const MdevHost& h, const std::string& doc, const HostUse& use = {},
                           const Topology& topo = {},
                           std::vector<std::string>* warnings = nullptr) {
    auto p = plan_mdevs(h, topo, use, Parsed(doc), warnings);
    EXPECT_TRUE(p);
    return p.value_or(std::vector<MdevPlan>{});
}

// "uuid action reason" per mdev: one line to compare a whole plan by.
std::vector<std::string> summary(const std::vector<MdevPlan>& ps) {
    std::vector<std::string> out;
    for (const auto& p : ps)
        out.push_back(p.parent + " " + p.type + " " + p.uuid + " " + to_string(p.action) +
                      (p.reason == Reason::None ? "" : std::string(" ") + to_string(p.reason)));
    return out;
}

std::string U(const char* parent, const char* type, unsigned i) {
    return mdev_uuid(parent, type, i);
}

TEST(MdevPlanner, NoEntriesNoPlan) {
    MdevHost h = samples();
    add(h, kForeign, "mbochs", "mbochs-small", 3);
    EXPECT_FALSE(plan_mdevs(h, {}, {}, Config{}));
}

TEST(MdevPlanner, MissingMdevsAreCreatedWithTheirUuids) {
    MdevHost h = samples();
    add(h, U("mbochs", "mbochs-small", 0), "mbochs", "mbochs-small", 7);
    auto ps = plan(h, mdev("mbochs", "mbochs-small", 2) + mdev("mtty", "mtty-2", 1));
    EXPECT_EQ(summary(ps), (std::vector<std::string>{
                               "mbochs mbochs-small " + U("mbochs", "mbochs-small", 0) + " ready",
                               "mbochs mbochs-small " + U("mbochs", "mbochs-small", 1) + " create",
                               "mtty mtty-2 " + U("mtty", "mtty-2", 0) + " create"}));
    EXPECT_EQ(ps[0].group, 7u);
    EXPECT_TRUE(ps[0].writes().empty());
    ASSERT_EQ(ps[1].writes().size(), 1u);
    EXPECT_EQ(ps[1].writes()[0].path,
              "sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/create");
    EXPECT_EQ(ps[1].writes()[0].value, U("mbochs", "mbochs-small", 1));
    EXPECT_EQ(ps[1].resource_name, "vfiod.io/mbochs-small");
    EXPECT_EQ(ps[2].type_name, "Dual port serial");
    EXPECT_FALSE(ps[2].group);
}

// All or nothing per pair: a pair that cannot have every missing mdev gets none; the earlier
// pairs on the same parent are kept, and a later pair that fits is still made.
TEST(MdevPlanner, APairTheBudgetCannotHoldIsRefusedWhole) {
    MdevHost h = samples();
    h.parents["mbochs"].types["mbochs-large"].available = 2;
    add(h, U("mbochs", "mbochs-small", 0), "mbochs", "mbochs-small", 3);
    auto ps = plan(h, mdev("mbochs", "mbochs-small", 1) + mdev("mbochs", "mbochs-large", 8) +
                          mdev("mbochs", "mbochs-medium", 1));
    ASSERT_EQ(ps.size(), 10u);
    EXPECT_EQ(ps[0].action, MdevAction::Ready);
    for (size_t i = 1; i < 9; ++i) {
        EXPECT_EQ(ps[i].action, MdevAction::Refuse) << i;
        EXPECT_EQ(ps[i].reason, Reason::MdevUnavailable) << i;
        EXPECT_EQ(ps[i].uuid, U("mbochs", "mbochs-large", static_cast<unsigned>(i - 1)));
        EXPECT_TRUE(ps[i].writes().empty());
    }
    EXPECT_EQ(ps[1].details.at(0), "mbochs type mbochs-large: 8 to create, 2 "
                                   "available_instances; none of them is created");
    EXPECT_EQ(ps[9].action, MdevAction::Create);
    // Exactly enough is enough (and the small one, named no more, goes).
    h.parents["mbochs"].types["mbochs-large"].available = 8;
    ps = plan(h, mdev("mbochs", "mbochs-large", 8));
    ASSERT_EQ(ps.size(), 9u);
    EXPECT_EQ(ps[7].action, MdevAction::Create);
    EXPECT_EQ(ps[8].action, MdevAction::Remove);
    // An unreadable available_instances makes nothing.
    h.parents["mbochs"].types["mbochs-large"].available.reset();
    EXPECT_EQ(plan(h, mdev("mbochs", "mbochs-large", 1))[0].reason, Reason::MdevUnavailable);
}

TEST(MdevPlanner, AbsentParentsAndUnknownTypesAreRefused) {
    auto ps = plan(samples(), mdev("mdpy", "mdpy-vga", 1) + mdev("mbochs", "mbochs-huge", 2) +
                                  mdev("0000:3b:00.0", "nvidia-222", 1));
    EXPECT_EQ(summary(ps), (std::vector<std::string>{
                               "0000:3b:00.0 nvidia-222 " + U("0000:3b:00.0", "nvidia-222", 0) +
                                   " refuse no-parent",
                               "mbochs mbochs-huge " + U("mbochs", "mbochs-huge", 0) +
                                   " refuse unknown-type",
                               "mbochs mbochs-huge " + U("mbochs", "mbochs-huge", 1) +
                                   " refuse unknown-type",
                               "mdpy mdpy-vga " + U("mdpy", "mdpy-vga", 0) + " refuse no-parent"}));
}

// count 2 -> 1: index 1 goes unless it is open; a foreign mdev stays, listed last.
TEST(MdevPlanner, OwnMdevsAboveCountGoUnlessOpenAndForeignOnesStay) {
    MdevHost h = samples();
    add(h, U("mbochs", "mbochs-small", 0), "mbochs", "mbochs-small", 3);
    add(h, U("mbochs", "mbochs-small", 1), "mbochs", "mbochs-small", 4);
    add(h, kForeign, "mbochs", "mbochs-small", 5);
    const std::string doc = mdev("mbochs", "mbochs-small", 1);
    auto ps = plan(h, doc);
    EXPECT_EQ(summary(ps), (std::vector<std::string>{
                               "mbochs mbochs-small " + U("mbochs", "mbochs-small", 0) + " ready",
                               "mbochs mbochs-small " + U("mbochs", "mbochs-small", 1) + " remove",
                               "mbochs mbochs-small " + kForeign + " foreign"}));
    ASSERT_EQ(ps[1].writes().size(), 1u);
    EXPECT_EQ(ps[1].writes()[0].path,
              "sys/bus/mdev/devices/" + U("mbochs", "mbochs-small", 1) + "/remove");
    EXPECT_EQ(ps[1].writes()[0].value, "1");
    EXPECT_TRUE(ps[2].writes().empty());

    HostUse use;
    use.mdevs[U("mbochs", "mbochs-small", 1)] = {"/dev/vfio/4 is open by qemu (pid 42)"};
    ps = plan(h, doc, use);
    EXPECT_EQ(ps[1].action, MdevAction::Refuse);
    EXPECT_EQ(ps[1].reason, Reason::InUseMdev);
    EXPECT_EQ(ps[1].blockers, use.mdevs.begin()->second);
    EXPECT_TRUE(ps[1].writes().empty());
    // count 0: every own one goes; the foreign one still stays.
    ps = plan(h, mdev("mbochs", "mbochs-small", 0));
    EXPECT_EQ(ps.size(), 3u);
    EXPECT_EQ(ps[0].action, MdevAction::Remove);
    EXPECT_EQ(ps[1].action, MdevAction::Remove);
    EXPECT_EQ(ps[2].action, MdevAction::Foreign);
}

// A pass makes no UUID of a pair an earlier pass met (issue: 1.7 ms a pair, every pass): the
// process's table keeps them, and the plan is the same with it warm.
TEST(MdevPlanner, APassMakesNoUuidsOfAPairAnEarlierPassMet) {
    MdevHost h;
    h.parents["warm"].types["w-1"] = MdevType{"w", 10};
    add(h, U("warm", "w-1", 3), "warm", "w-1", 3);
    add(h, kForeign, "warm", "w-1", 4);
    const std::string doc = mdev("warm", "w-1", 1);
    const size_t before = OwnMdevUuids::shared().pairs_made();
    const auto first = summary(plan(h, doc));
    EXPECT_EQ(OwnMdevUuids::shared().pairs_made(), before + 1);
    EXPECT_EQ(first, (std::vector<std::string>{
                         "warm w-1 " + U("warm", "w-1", 0) + " create",
                         "warm w-1 " + U("warm", "w-1", 3) + " remove",
                         "warm w-1 " + kForeign + " foreign"}));
    EXPECT_EQ(summary(plan(h, doc)), first);
    EXPECT_EQ(OwnMdevUuids::shared().pairs_made(), before + 1);
}

// Own mdevs of a type the parent's entries no longer name go; a parent no entry governs keeps
// its mdevs (shown foreign: vfiod no longer answers for them).
TEST(MdevPlanner, TypesNoLongerNamedGoOnGovernedParentsOnly) {
    MdevHost h = samples();
    add(h, U("mbochs", "mbochs-medium", 0), "mbochs", "mbochs-medium", 3);
    add(h, U("mbochs", "mbochs-large", 0), "mbochs", "", 4);  // probe not done: no mdev_type
    add(h, U("mtty", "mtty-2", 0), "mtty", "mtty-2", 5);
    auto ps = plan(h, mdev("mbochs", "mbochs-small", 0));
    EXPECT_EQ(summary(ps), (std::vector<std::string>{
                               "mbochs mbochs-large " + U("mbochs", "mbochs-large", 0) + " remove",
                               "mbochs mbochs-medium " + U("mbochs", "mbochs-medium", 0) +
                                   " remove",
                               "mtty mtty-2 " + U("mtty", "mtty-2", 0) + " foreign"}));
}

TEST(MdevPlanner, SelectorsMatchPciParentsAndProtectionWins) {
    MdevHost h;
    for (const char* a : {"0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0"}) {
        auto& p = h.parents[a];
        p.address = PciAddress::parse(a);
        p.types["nvidia-222"] = MdevType{"GRID T4-1Q", 16};
    }
    Topology topo;
    for (const char* a : {"0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0"}) {
        PciFunction fn;
        fn.address = *PciAddress::parse(a);
        fn.vendor = 0x10de;
        fn.device = a[6] == 'd' ? 0x1eb9 : 0x1eb8;
        topo.functions[fn.address] = fn;
    }
    std::vector<std::string> w;
    auto ps = plan(h,
                   "[[mdev]]\nselector = \"10de:1eb8\"\ntype = \"nvidia-222\"\ncount = 1\n" +
                       mdev("0000:3b:00.0", "nvidia-222", 3) +
                       "[[protect]]\naddress = \"0000:3c:00.0\"\n",
                   {}, topo, &w);
    EXPECT_EQ(summary(ps), (std::vector<std::string>{
                               "0000:3b:00.0 nvidia-222 " + U("0000:3b:00.0", "nvidia-222", 0) +
                                   " create",
                               "0000:3c:00.0 nvidia-222 " + U("0000:3c:00.0", "nvidia-222", 0) +
                                   " refuse protected"}));
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0], "t.toml:5:1: [[mdev]] names type nvidia-222 on 0000:3b:00.0, as the entry "
                    "at t.toml:1:1 does; the first wins");
}

// A PCI function an [[mdev]] entry names is never bound: mdev-parent, after sriov-pf.
TEST(MdevPlanner, TheGroupPlannerRefusesMdevParents) {
    Topology topo;
    topo.iommu_enabled = true;
    PciFunction fn;
    fn.address = *PciAddress::parse("0000:3b:00.0");
    fn.vendor = 0x10de;
    fn.device = 0x1eb8;
    fn.class_code = 0x030200;
    fn.driver = "nvidia";
    fn.iommu_group = 5;
    topo.functions[fn.address] = fn;
    topo.groups[5] = {fn.address};
    const std::string allow = "[[device]]\nselector = \"10de:*\"\n";
    Plan p = make_plan(topo, {}, Parsed(allow + mdev("0000:3b:00.0", "nvidia-222", 1)));
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].action, Action::Refuse);
    EXPECT_EQ(p.groups[0].reason, Reason::MdevParent);
    EXPECT_EQ(p.groups[0].details.at(0),
              "0000:3b:00.0: mediated-device parent named by the [[mdev]] entry at t.toml:3:1; "
              "vfiod makes its mdevs and never binds it");
    EXPECT_EQ(make_plan(topo, {}, Parsed(allow)).groups[0].action, Action::Bind);
}

// "mdevs" is in the plan JSON only when the config has [[mdev]] entries, in §12's key order.
TEST(MdevPlanner, JsonKeyOnlyWithEntries) {
    Plan plain;
    EXPECT_EQ(plan_to_json(plain, false).find("mdevs"), std::string::npos);
    Plan p;
    p.mdevs = plan(samples(), mdev("mtty", "mtty-2", 1));
    EXPECT_EQ(plan_to_json(p, false),
              "{\"iommu\":false,\"groups\":[],\"mdevs\":[{\"uuid\":\"" + U("mtty", "mtty-2", 0) +
                  "\",\"parent\":\"mtty\",\"type\":\"mtty-2\",\"type_name\":\"Dual port "
                  "serial\",\"resource_name\":\"vfiod.io/mtty-2\",\"group\":null,\"action\":"
                  "\"create\",\"reason\":null,\"blockers\":[],\"writes\":[{\"path\":\"sys/"
                  "class/mdev_bus/mtty/mdev_supported_types/mtty-2/create\",\"value\":\"" +
                  U("mtty", "mtty-2", 0) + "\"}]}]}");
}

}  // namespace
}  // namespace vfiod
