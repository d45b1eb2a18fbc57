// vfioctl doctor's diagnosis (cli/doctor): the host checks, what KubeVirt will count per
// resource, health, and advice for every reason a plan can give.
#include <gtest/gtest.h>

#include "doctor.hpp"
#include "fake_tree.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

namespace vfiod::cli {
namespace {

using vfiod::test::FakeTree;

PciAddress A(const char* s) { return *PciAddress::parse(s); }

TEST(DoctorAdvice, EveryPlanningReasonHasAFixAndInUseOnesEndWithBind) {
    for (Reason r : {Reason::NoIommu, Reason::Protected, Reason::InUseStorage,
                     Reason::InUseNetwork, Reason::InUseDevice, Reason::SriovPf, Reason::BootVga,
                     Reason::Companion, Reason::InUseVf, Reason::VfsExceedTotal})
        EXPECT_FALSE(advice(r, A("0000:01:00.0")).empty()) << to_string(r);
    // Host use changes without a uevent: after the fix, a Bind has vfiod decide again.
    for (Reason r : {Reason::InUseStorage, Reason::InUseNetwork, Reason::InUseDevice})
        EXPECT_NE(advice(r, A("0000:02:00.0")).find("vfioctl bind 0000:02:00.0"),
                  std::string::npos)
            << to_string(r);
    EXPECT_EQ(advice(Reason::Protected, A("0000:02:00.0")).find("vfioctl bind"),
              std::string::npos);
    EXPECT_NE(advice(Reason::NoIommu, A("0000:01:00.0")).find("intel_iommu=on"), std::string::npos);
    // Storage is held in more ways than a mount: each claimant has its own way to let go.
    for (const char* how : {"vgchange -an", "mdadm --stop", "multipath -f", "zpool export"})
        EXPECT_NE(advice(Reason::InUseStorage, A("0000:01:00.0")).find(how), std::string::npos)
            << how;
    // Execution outcomes are not doctor's: a plan never carries them.
    for (Reason r : {Reason::None, Reason::InUseVfio, Reason::VfioUnavailable, Reason::WriteFailed,
                     Reason::Stuck, Reason::Drift})
        EXPECT_EQ(advice(r, A("0000:01:00.0")), "") << to_string(r);
}

struct DoctorHost : ::testing::Test {
    Diagnosis diagnose_tree() {
        auto r = load_config(tree.root(), std::nullopt);
        EXPECT_TRUE(r.config.has_value());
        config = *r.config;
        fs = std::make_unique<KernelHostFs>(tree.root());
        snapshot = read_snapshot(*fs);
        plan = make_plan(snapshot.topology, snapshot.use, config);
        return diagnose(*fs, snapshot.topology, config, plan);
    }
    FakeTree tree;
    bool built = (vfiod::test::build_gpu_host(tree), true);
    Config config;
    std::unique_ptr<HostFs> fs;
    Snapshot snapshot;
    Plan plan;
};

TEST_F(DoctorHost, CountsWhatKubeVirtSeesNowAndAfterBinding) {
    Diagnosis dx = diagnose_tree();
    ASSERT_EQ(dx.checks.size(), 3u);
    for (const auto& c : dx.checks)
        EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
    EXPECT_EQ(dx.findings.size(), 4u);  // the H100, two I210s, the NVMe; never the companion
    EXPECT_FALSE(dx.healthy);           // nothing is bound yet, and two groups are refused
    using Counts = std::pair<int, int>;
    EXPECT_EQ(dx.per_resource.at("nvidia.com/GH100_H100_PCIE"), Counts(0, 1));
    EXPECT_EQ(dx.per_resource.at("intel.com/I210"), Counts(0, 1));  // enp4s0 is in a bond
    EXPECT_EQ(dx.per_resource.at("samsung.com/PM9A1"), Counts(0, 0));
}

TEST_F(DoctorHost, SaysWhyTheIommuIsMissing) {
    tree.remove("sys/class/iommu");
    tree.remove("sys/kernel/iommu_groups");
    Diagnosis dx = diagnose_tree();
    EXPECT_FALSE(dx.checks[0].ok);
    EXPECT_NE(dx.checks[0].detail.find("asks for it"), std::string::npos)
        << "the gpu host's cmdline has intel_iommu=on: " << dx.checks[0].detail;
    EXPECT_FALSE(dx.healthy);
}

}  // namespace
}  // namespace vfiod::cli
