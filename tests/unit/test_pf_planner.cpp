// The planner's SR-IOV half (core/pf_planner.cpp, DESIGN §11) on issue 24's host: the sriov-host
// fixture's PF (1b36:0010 on nvme, sriov_totalvfs 2) under the fake kernel, whose sriov_numvfs
// writes make real-looking VFs. Each test sets the host up through the kernel, reads it as
// vfioctl plan does, and checks the plan's pfs and groups.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <memory>

#include "core/plan_json.hpp"
#include "fake_kernel.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

using namespace vfiod;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;
using vfiod::test::kSriovPf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const char* kVf0 = "0000:02:00.1";
const char* kVf1 = "0000:02:00.2";
const std::string kPfDir = std::string("sys/bus/pci/devices/") + kSriovPf + "/";

PciAddress A(const char* s) { return *PciAddress::parse(s); }

// "path <- value" per write, as the text output reads.
std::vector<std::string> shown(const std::vector<Write>& writes) {
    std::vector<std::string> out;
    for (const auto& w : writes)
        out.push_back(w.path() + " <- " + w.value);
    return out;
}

struct SriovPlan : ::testing::Test {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    Snapshot snapshot;
    Config config;
    Plan planned;

    SriovPlan() {
        test::build_sriov_host(tree);
        kernel = std::make_unique<FakeKernel>(tree);
    }
    // The PF's VFs as vfiod would leave them: autoprobe off, then the count.
    void make_vfs(unsigned n) {
        ASSERT_EQ(kernel->write(kPfDir + "sriov_drivers_autoprobe", "0"), 0);
        ASSERT_EQ(kernel->write(kPfDir + "sriov_numvfs", std::to_string(n)), 0);
    }
    // The plan is kept until the next call, so a reference into it may be held until then.
    const Plan& plan(const std::string& toml) {
        ConfigResult cr = parse_config(toml, "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        config = cr.config.value_or(Config{});
        snapshot = read_snapshot(*kernel);
        planned = make_plan(snapshot.topology, snapshot.use, config);
        return planned;
    }
    // The one PF of a plan that must have exactly one.
    static const PfPlan& only_pf(const Plan& p) {
        static const PfPlan none;
        EXPECT_TRUE(p.pfs.has_value());
        EXPECT_EQ(p.pfs ? p.pfs->size() : 0u, 1u);
        return p.pfs && p.pfs->size() == 1 ? p.pfs->front() : none;
    }
    static const GroupPlan* group(const Plan& p, unsigned n) {
        for (const auto& g : p.groups)
            if (g.group == n)
                return &g;
        return nullptr;
    }
};

std::string sriov(unsigned n) {
    return "[[sriov]]\nselector = \"1b36:0010\"\nnum_vfs = " + std::to_string(n) + "\n";
}

TEST_F(SriovPlan, CreatesFromZeroWithAutoprobeOffFirst) {
    const PfPlan& pf = only_pf(plan(sriov(2)));
    EXPECT_EQ(pf.address, A(kSriovPf));
    EXPECT_EQ(pf.total_vfs, 2u);
    EXPECT_EQ(pf.num_vfs, 0u);
    EXPECT_EQ(pf.wanted_vfs, 2u);
    EXPECT_EQ(pf.action, PfAction::Create);
    EXPECT_EQ(pf.reason, Reason::None);
    EXPECT_TRUE(pf.blockers.empty());
    EXPECT_THAT(shown(pf.writes), ElementsAre(kPfDir + "sriov_drivers_autoprobe <- 0",
                                              kPfDir + "sriov_numvfs <- 2",
                                              kPfDir + "sriov_drivers_autoprobe <- 1"));
}

TEST_F(SriovPlan, AlreadyThereIsReadyWithNothingToWrite) {
    make_vfs(2);
    const PfPlan& pf = only_pf(plan(sriov(2)));
    EXPECT_EQ(pf.num_vfs, 2u);
    EXPECT_EQ(pf.action, PfAction::Ready);
    EXPECT_EQ(pf.reason, Reason::None);
    EXPECT_TRUE(pf.writes.empty());
}

// The kernel refuses 1 -> 2 with EBUSY: the count goes through 0.
TEST_F(SriovPlan, GrowingGoesThroughZero) {
    make_vfs(1);
    const PfPlan& pf = only_pf(plan(sriov(2)));
    EXPECT_EQ(pf.action, PfAction::Create);
    EXPECT_THAT(shown(pf.writes),
                ElementsAre(kPfDir + "sriov_drivers_autoprobe <- 0", kPfDir + "sriov_numvfs <- 0",
                            kPfDir + "sriov_numvfs <- 2", kPfDir + "sriov_drivers_autoprobe <- 1"));
    // Writing the plan's writes to the kernel brings the PF to the count, with no EBUSY.
    for (const auto& w : pf.writes)
        EXPECT_EQ(kernel->write(w.path(), w.value), 0) << w.path() << " <- " << w.value;
    EXPECT_EQ(only_pf(plan(sriov(2))).action, PfAction::Ready);
}

// num_vfs = 0 removes the VFs; no VF is made, so autoprobe is left as it is.
TEST_F(SriovPlan, ShrinkingToZeroWritesOnlyTheZero) {
    make_vfs(2);
    EXPECT_THAT(shown(only_pf(plan(sriov(0))).writes), ElementsAre(kPfDir + "sriov_numvfs <- 0"));
    EXPECT_TRUE(sriov_writes(A(kSriovPf), 3, 3).empty());
}

TEST_F(SriovPlan, AboveTheTotalIsRefusedNamingTheEntry) {
    const PfPlan& pf = only_pf(plan(sriov(3)));
    EXPECT_EQ(pf.action, PfAction::Refuse);
    EXPECT_EQ(pf.reason, Reason::VfsExceedTotal);
    EXPECT_THAT(pf.blockers, ElementsAre(A(kSriovPf)));
    ASSERT_EQ(pf.details.size(), 1u);
    EXPECT_THAT(pf.details[0], HasSubstr("num_vfs = 3 (the [[sriov]] entry at t.toml:1:1) is "
                                         "above its sriov_totalvfs, 2"));
    EXPECT_TRUE(pf.writes.empty());
}

// A VF a VM holds through vfio (its group node open) blocks a change, which would destroy it;
// the same VF in use does not make a PF whose count is right anything but ready.
TEST_F(SriovPlan, AVfOpenByAVmRefusesAChangeButNotReady) {
    make_vfs(1);
    ASSERT_EQ(kernel->write(std::string("sys/bus/pci/devices/") + kVf0 + "/driver_override",
                            "vfio-pci"),
              0);
    ASSERT_EQ(kernel->write("sys/bus/pci/drivers_probe", kVf0), 0);
    ASSERT_TRUE(kernel->exists("dev/vfio/8"));
    tree.write_file("proc/4242/comm", "qemu-system-x86\n");
    tree.symlink("proc/4242/fd/30", "/dev/vfio/8");

    const PfPlan& pf = only_pf(plan(sriov(2)));
    EXPECT_EQ(pf.action, PfAction::Refuse);
    EXPECT_EQ(pf.reason, Reason::InUseVf);
    EXPECT_THAT(pf.blockers, ElementsAre(A(kVf0)));
    ASSERT_FALSE(pf.details.empty());
    EXPECT_THAT(pf.details[0], HasSubstr(std::string(kVf0) + ": "));
    EXPECT_THAT(pf.details[0], HasSubstr("qemu-system-x86"));
    EXPECT_TRUE(pf.writes.empty());

    EXPECT_EQ(only_pf(plan(sriov(1))).action, PfAction::Ready);
}

// The host's own use of a VF (DESIGN §4's rules: here a route through its netdev) blocks a
// change the same way; each VF in use is one blocker, whatever the number of lines.
TEST_F(SriovPlan, AVfTheHostUsesRefusesAChange) {
    make_vfs(2);
    plan(sriov(1));  // reads the host and the config
    snapshot.use.network[A(kVf1)] = {"ens1v1 carries a route", "ens1v1 is enslaved to br0"};
    Plan p = make_plan(snapshot.topology, snapshot.use, config);
    const PfPlan& pf = only_pf(p);
    EXPECT_EQ(pf.reason, Reason::InUseVf);
    EXPECT_THAT(pf.blockers, ElementsAre(A(kVf1)));
    EXPECT_THAT(pf.details, ElementsAre(std::string(kVf1) + ": ens1v1 carries a route",
                                        std::string(kVf1) + ": ens1v1 is enslaved to br0"));
}

// The PF an entry names is never bound, even with no VFs (nothing else would stop it: it is
// allowlisted by its own ID); without the entry the same allowlist binds it.
TEST_F(SriovPlan, ThePfIsNeverBound) {
    const std::string allow = "[[device]]\nselector = \"1b36:0010\"\n";
    const GroupPlan* g = group(plan(allow), 7);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->action, Action::Bind);

    Plan p = plan(allow + sriov(2));
    g = group(p, 7);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->action, Action::Refuse);
    EXPECT_EQ(g->reason, Reason::SriovPf);
    EXPECT_THAT(g->blockers, ElementsAre(A(kSriovPf)));
    EXPECT_THAT(g->details, ElementsAre(HasSubstr("named by the [[sriov]] entry at t.toml:3:1")));
    // The daemon's one-group planner and journal vetting use the same rule.
    auto one = plan_one_group(snapshot.topology, snapshot.use, config, 7, {});
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->reason, Reason::SriovPf);
    const PciFunction* fn = snapshot.topology.find(A(kSriovPf));
    ASSERT_NE(fn, nullptr);
    auto refusals = refusals_of(*fn, snapshot.use, config);
    ASSERT_EQ(refusals.size(), 1u);
    EXPECT_EQ(refusals[0].reason, Reason::SriovPf);
}

// QEMU's NVMe VFs carry the PF's own ID: one [[device]] selector names the PF and its VFs, and
// one [[sriov]] selector matches them all too. Only the PF is a PF: it is refused (sriov-pf) and
// planned for its count; the VFs, each alone in its group, are bound.
TEST_F(SriovPlan, VfsWithThePfsOwnIdAreBoundAndThePfIsNot) {
    make_vfs(2);
    Plan p = plan("[[device]]\nselector = \"1b36:0010\"\nresource_name = \"example.com/nvme\"\n" +
                  sriov(2));
    EXPECT_EQ(only_pf(p).address, A(kSriovPf));
    EXPECT_EQ(only_pf(p).action, PfAction::Ready);
    ASSERT_NE(group(p, 7), nullptr);
    EXPECT_EQ(group(p, 7)->reason, Reason::SriovPf);
    for (unsigned n : {8u, 9u}) {
        const GroupPlan* g = group(p, n);
        ASSERT_NE(g, nullptr) << n;
        EXPECT_EQ(g->action, Action::Bind) << n;
        ASSERT_EQ(g->devices.size(), 1u);
        EXPECT_EQ(g->devices[0].role, Role::Allowlisted);
        EXPECT_EQ(g->devices[0].resource_name, "example.com/nvme");
    }
    EXPECT_TRUE(p.warnings.empty());
}

TEST_F(SriovPlan, AProtectedPfIsNotTouched) {
    const PfPlan& pf =
        only_pf(plan(sriov(2) + "[[protect]]\naddress = \"" + std::string(kSriovPf) + "\"\n"));
    EXPECT_EQ(pf.action, PfAction::Refuse);
    EXPECT_EQ(pf.reason, Reason::Protected);
    EXPECT_TRUE(pf.writes.empty());
}

// As for [[device]], the first matching entry governs and the plan says which lost.
TEST_F(SriovPlan, TheFirstMatchingEntryWinsWithAWarning) {
    Plan p = plan(sriov(1) + "[[sriov]]\naddress = \"" + std::string(kSriovPf) +
                  "\"\nnum_vfs = 2\n");
    EXPECT_EQ(only_pf(p).wanted_vfs, 1u);
    EXPECT_THAT(p.warnings,
                ElementsAre(std::string(kSriovPf) +
                            " matches the [[sriov]] entries at t.toml:1:1 and t.toml:4:1; the "
                            "first one applies"));
}

// A driverless PF cannot make VFs (ENOENT): still planned, and the plan says why it may fail.
TEST_F(SriovPlan, ADriverlessPfIsPlannedWithAWarningLine) {
    ASSERT_EQ(kernel->write("sys/bus/pci/drivers/nvme/unbind", kSriovPf), 0);
    const PfPlan& pf = only_pf(plan(sriov(2)));
    EXPECT_EQ(pf.action, PfAction::Create);
    EXPECT_THAT(pf.details, ElementsAre(HasSubstr("has no driver")));
}

// "pfs" is in the JSON exactly when the config has [[sriov]] entries, so other hosts' plan JSON
// is what it was; each PF object has DESIGN §11's keys in order.
TEST_F(SriovPlan, JsonHasPfsOnlyWithSriovEntries) {
    Plan none = plan("[[device]]\nselector = \"1b36:0010\"\n");
    EXPECT_FALSE(none.pfs.has_value());
    EXPECT_EQ(plan_to_json(none, false).find("pfs"), std::string::npos);

    Plan other = plan("[[sriov]]\nselector = \"15b3:101d\"\nnum_vfs = 8\n");
    ASSERT_TRUE(other.pfs.has_value());
    EXPECT_TRUE(other.pfs->empty());
    EXPECT_THAT(plan_to_json(other, false), HasSubstr(R"("groups":[],"pfs":[]})"));

    make_vfs(1);
    EXPECT_EQ(plan_to_json(plan(sriov(2)), false),
              R"({"iommu":true,"groups":[],"pfs":[{"address":"0000:02:00.0","total_vfs":2,)"
              R"("num_vfs":1,"wanted_vfs":2,"action":"create","reason":null,"blockers":[],)"
              R"("writes":[{"path":"sys/bus/pci/devices/0000:02:00.0/sriov_drivers_autoprobe",)"
              R"("value":"0"},{"path":"sys/bus/pci/devices/0000:02:00.0/sriov_numvfs",)"
              R"("value":"0"},{"path":"sys/bus/pci/devices/0000:02:00.0/sriov_numvfs",)"
              R"("value":"2"},{"path":"sys/bus/pci/devices/0000:02:00.0/sriov_drivers_autoprobe",)"
              R"("value":"1"}]}]})");
    JsonWriter w(false);
    PfPlan refused = only_pf(plan(sriov(3)));
    write_pf_json(w, refused, std::string("refused"));
    EXPECT_EQ(w.str(), R"({"address":"0000:02:00.0","total_vfs":2,"num_vfs":1,"wanted_vfs":3,)"
                       R"("state":"refused","reason":"vfs-exceed-total","blockers":)"
                       R"(["0000:02:00.0"]})");
}

}  // namespace
