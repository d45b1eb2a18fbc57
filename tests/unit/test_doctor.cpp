// vfioctl doctor's diagnosis (cli/doctor): the host checks, what KubeVirt will count per
// resource, health, advice for every reason a plan can give, the fix for each SR-IOV PF vfiod
// will not or cannot give its VFs, and for each [[mdev]] pair that yields fewer than wanted.
#include <gtest/gtest.h>

#include "doctor.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "mdev_test_host.hpp"
#include "scenarios.hpp"

namespace vfiod::cli {
namespace {

using vfiod::test::FakeTree;

PciAddress A(const char* s) { return *PciAddress::parse(s); }

TEST(DoctorAdvice, EveryPlanningReasonHasAFixAndInUseOnesEndWithBind) {
    for (Reason r : {Reason::NoIommu, Reason::Protected, Reason::InUseStorage,
                     Reason::InUseNetwork, Reason::InUseDevice, Reason::SriovPf,
                     Reason::MdevParent, Reason::BootVga, Reason::Companion, Reason::InUseVf,
                     Reason::VfsExceedTotal})
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

// DESIGN §13: the GPU host with only group 13 allowlisted and already on vfio-pci, so that the
// health vfiod publishes is all that decides whether it is ready.
struct DoctorHealth : DoctorHost {
    Diagnosis diagnose_bound(const std::map<PciAddress, client::Health>& health) {
        ConfigResult cr = parse_config("[[device]]\nselector = \"10de:*\"\n"
                                       "resource_name = \"nvidia.com/GH100\"\n", "t.toml");
        EXPECT_TRUE(cr.config);
        config = cr.config.value_or(Config{});
        fs = std::make_unique<KernelHostFs>(tree.root());
        snapshot = read_snapshot(*fs);
        for (const char* a : {"0000:01:00.0", "0000:01:00.1"})
            snapshot.topology.functions.at(A(a)).driver = "vfio-pci";
        snapshot.topology.drivers.insert("vfio-pci");
        plan = make_plan(snapshot.topology, snapshot.use, config);
        return diagnose(*fs, snapshot.topology, config, plan, {}, {health, {}});
    }
};

TEST_F(DoctorHealth, AFailedFunctionIsNotReadyAndSaysToReseatReplaceAndClear) {
    Diagnosis ok = diagnose_bound({{A("0000:01:00.0"), {"ok", ""}}});
    ASSERT_EQ(ok.findings.size(), 2u);
    EXPECT_TRUE(ok.healthy);
    EXPECT_EQ(ok.findings[0].health_fix, "");
    EXPECT_EQ(diagnose_bound({}).findings[1].health.state, "");  // not read: nothing said

    Diagnosis dx = diagnose_bound({{A("0000:01:00.0"), {"failed", "aer-fatal: recovery failed"}},
                                   {A("0000:01:00.1"), {"unknown", "no-aer: no AER capability"}}});
    EXPECT_FALSE(dx.healthy);
    const Finding& gpu = dx.findings[0];
    EXPECT_EQ(gpu.health.reason, "aer-fatal: recovery failed");
    EXPECT_FALSE(gpu.failed_mate);
    for (const char* what : {"reseat the card", "slot and its power", "replace it if it fails again",
                             "`vfioctl bind 0000:01:00.0`", "systemctl reload vfiod"})
        EXPECT_NE(gpu.health_fix.find(what), std::string::npos) << what << ": " << gpu.health_fix;
    // Its group-mate's own health is only unknown, but the group failed: the fix is the GPU's.
    const Finding& audio = dx.findings[1];
    EXPECT_EQ(audio.health.state, "unknown");
    ASSERT_TRUE(audio.failed_mate);
    EXPECT_EQ(*audio.failed_mate, A("0000:01:00.0"));
    EXPECT_EQ(audio.health_fix, gpu.health_fix);
}

TEST_F(DoctorHealth, DegradedIsANoteAndUnknownOnlyInformation) {
    Diagnosis dx = diagnose_bound(
        {{A("0000:01:00.0"), {"degraded", "aer-correctable: 3 since start"}},
         {A("0000:01:00.1"), {"unknown", "no-aer: no AER capability"}}});
    EXPECT_TRUE(dx.healthy) << "degraded is a warning, not a failure";
    const std::string& fix = dx.findings[0].health_fix;
    for (const char* what : {"watch the counts", "`vfioctl bind 0000:01:00.0`",
                             "systemctl reload vfiod"})
        EXPECT_NE(fix.find(what), std::string::npos) << what << ": " << fix;
    EXPECT_EQ(fix.find("replace it if it fails again"), std::string::npos) << fix;
    EXPECT_FALSE(dx.findings[1].failed_mate);
    EXPECT_NE(dx.findings[1].health_fix.find("nothing to fix"), std::string::npos);
    EXPECT_EQ(health_advice({"ok", ""}, A("0000:01:00.0")), "");
    EXPECT_EQ(health_advice({"", ""}, A("0000:01:00.0")), "");
}

// Issue 24's host (the sriov-host fixture) under the fake kernel, whose sriov_numvfs writes make
// real-looking VFs: each PF of an [[sriov]] entry is a finding, with a fix when vfiod will not or
// cannot change its count.
struct DoctorSriov : ::testing::Test {
    static constexpr char kVf0[] = "0000:02:00.1";
    const std::string pf_dir = std::string("sys/bus/pci/devices/") + vfiod::test::kSriovPf + "/";

    DoctorSriov() {
        vfiod::test::build_sriov_host(tree);
        kernel = std::make_unique<vfiod::test::FakeKernel>(tree);
    }
    void make_vfs(unsigned n) {
        ASSERT_EQ(kernel->write(pf_dir + "sriov_drivers_autoprobe", "0"), 0);
        ASSERT_EQ(kernel->write(pf_dir + "sriov_numvfs", std::to_string(n)), 0);
    }
    // The diagnosis with [[sriov]] num_vfs = n for the fixture's PF, and `more` config after it.
    Diagnosis diagnose_with(unsigned n, const std::string& more = "") {
        ConfigResult cr = parse_config("[[sriov]]\nselector = \"1b36:0010\"\nnum_vfs = " +
                                           std::to_string(n) + "\n" + more,
                                       "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        config = cr.config.value_or(Config{});
        snapshot = read_snapshot(*kernel);
        plan = make_plan(snapshot.topology, snapshot.use, config);
        return diagnose(*kernel, snapshot.topology, config, plan);
    }
    // The one PF finding of a diagnosis that must have exactly one.
    static PfFinding only_pf(const Diagnosis& dx) {
        EXPECT_TRUE(dx.pfs && dx.pfs->size() == 1);
        return dx.pfs && dx.pfs->size() == 1 ? dx.pfs->front() : PfFinding{};
    }

    FakeTree tree;
    std::unique_ptr<vfiod::test::FakeKernel> kernel;
    Config config;
    Snapshot snapshot;
    Plan plan;
};

TEST_F(DoctorSriov, AboveTheTotalSaysHowFarToLowerItAndToReload) {
    Diagnosis dx = diagnose_with(3);
    PfFinding f = only_pf(dx);
    ASSERT_TRUE(f.pf);
    EXPECT_EQ(f.pf->reason, Reason::VfsExceedTotal);
    EXPECT_NE(f.fix.find("at most 2"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("systemctl reload vfiod"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
}

// The plan's details say who holds the VF (here a VM, through its group node); the fix names
// the VF and has vfiod try again with a reload, since nothing tells it the VM has gone.
TEST_F(DoctorSriov, AVfInUseIsNamedWithWhoHoldsItAndTheReload) {
    make_vfs(1);
    const std::string vf_dir = std::string("sys/bus/pci/devices/") + kVf0 + "/";
    ASSERT_EQ(kernel->write(vf_dir + "driver_override", "vfio-pci"), 0);
    ASSERT_EQ(kernel->write("sys/bus/pci/drivers_probe", kVf0), 0);
    tree.write_file("proc/4242/comm", "qemu-system-x86\n");
    tree.symlink("proc/4242/fd/30", "/dev/vfio/8");
    PfFinding f = only_pf(diagnose_with(2));
    ASSERT_TRUE(f.pf);
    EXPECT_EQ(f.pf->reason, Reason::InUseVf);
    ASSERT_FALSE(f.pf->details.empty());
    EXPECT_NE(f.pf->details[0].find("qemu-system-x86"), std::string::npos) << f.pf->details[0];
    EXPECT_NE(f.fix.find(std::string(kVf0) + " is in use"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("back to 1"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("systemctl reload vfiod"), std::string::npos) << f.fix;
}

TEST_F(DoctorSriov, AProtectedPfNamesTheEntry) {
    PfFinding f = only_pf(diagnose_with(2, "\n[[protect]]\naddress = \"0000:02:00.0\"\n"));
    ASSERT_TRUE(f.pf);
    EXPECT_EQ(f.pf->reason, Reason::Protected);
    EXPECT_NE(f.fix.find("[[protect]]"), std::string::npos) << f.fix;
}

// A driver binding to the PF is an event vfiod acts on: that fix needs no reload.
TEST_F(DoctorSriov, ADriverlessPfIsToldToLoadItsDriver) {
    ASSERT_EQ(kernel->write("sys/bus/pci/drivers/nvme/unbind", vfiod::test::kSriovPf), 0);
    Diagnosis dx = diagnose_with(2);
    PfFinding f = only_pf(dx);
    ASSERT_TRUE(f.pf);
    EXPECT_TRUE(f.driverless);
    EXPECT_EQ(f.pf->action, PfAction::Create);
    EXPECT_NE(f.fix.find("load the PF's driver"), std::string::npos) << f.fix;
    EXPECT_EQ(f.fix.find("reload"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
}

TEST_F(DoctorSriov, AReadyPfOrOneAboutToChangeHasNothingToFix) {
    PfFinding about = only_pf(diagnose_with(2));
    EXPECT_FALSE(about.driverless);
    EXPECT_EQ(about.fix, "");
    make_vfs(2);
    PfFinding ready = only_pf(diagnose_with(2));
    ASSERT_TRUE(ready.pf);
    EXPECT_EQ(ready.pf->action, PfAction::Ready);
    EXPECT_EQ(ready.fix, "");
}

TEST_F(DoctorHost, NoSriovOrMdevEntriesNoPfsNorMdevs) {
    Diagnosis dx = diagnose_tree();
    EXPECT_FALSE(dx.pfs.has_value());
    EXPECT_FALSE(dx.mdevs.has_value());
}

// Issue 37, finding 8: [[sriov]] entries are an allowlist too; a host with no other entry and
// its VFs made is healthy. An empty one names the file it read.
TEST_F(DoctorSriov, AnSriovOnlyConfigIsNotAnEmptyAllowlist) {
    make_vfs(2);
    Diagnosis dx = diagnose_with(2);
    ASSERT_EQ(dx.checks.size(), 3u);
    EXPECT_EQ(dx.checks[2].name, "allowlist");
    EXPECT_TRUE(dx.checks[2].ok) << dx.checks[2].detail;
    EXPECT_EQ(dx.checks[2].detail, "1 [[sriov]] entry");
    EXPECT_TRUE(dx.healthy);

    ConfigResult cr = parse_config("[daemon]\nmode = \"enforce\"\n", "/srv/host-a/vfiod.toml");
    ASSERT_TRUE(cr.config);
    dx = diagnose(*kernel, snapshot.topology, *cr.config, plan);
    EXPECT_FALSE(dx.checks[2].ok);
    EXPECT_EQ(dx.checks[2].detail,
              "the allowlist is empty: add [[device]], [[sriov]] or [[mdev]] entries to "
              "/srv/host-a/vfiod.toml");
    EXPECT_FALSE(dx.healthy);
}

// [[mdev]] pairs (DESIGN §12) on the fake kernel, with the kernel's sample parents: one finding
// per (parent, type) pair, its counts, and the fix for why it yields fewer than wanted.
struct DoctorMdev : ::testing::Test, vfiod::test::FakeMdevHost {
    // With vfio-pci loaded every host check passes, so that only the mdevs decide health.
    DoctorMdev() { tree.add_driver("vfio-pci"); }
    static std::string entry(const char* parent, const char* type, unsigned count) {
        return "[[mdev]]\nparent = \"" + std::string(parent) + "\"\ntype = \"" + type +
               "\"\ncount = " + std::to_string(count) + "\n";
    }
    Diagnosis diagnose_with(const std::string& toml, const DaemonHealth& health = {}) {
        ConfigResult cr = parse_config(toml, "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        config = cr.config.value_or(Config{});
        snapshot = read_snapshot(*kernel);
        plan = make_plan(snapshot.topology, snapshot.use, config);
        plan.mdevs = plan_mdevs(snapshot.mdevs, snapshot.topology, snapshot.use, config);
        return diagnose(*kernel, snapshot.topology, config, plan, snapshot.mdevs, health);
    }
    // The one mdev finding of a diagnosis that must have exactly one.
    static MdevFinding only_mdev(const Diagnosis& dx) {
        EXPECT_TRUE(dx.mdevs && dx.mdevs->size() == 1);
        return dx.mdevs && dx.mdevs->size() == 1 ? dx.mdevs->front() : MdevFinding{};
    }
    void create(const char* type, const std::string& uuid) {
        ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", type), uuid), 0);
    }

    Config config;
    Snapshot snapshot;
    Plan plan;
};

TEST_F(DoctorMdev, AnAbsentParentIsToldToLoadItsDriver) {
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-small", 2));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.parent, "mbochs");
    EXPECT_EQ(f.resource_name, "vfiod.io/mbochs-small");
    EXPECT_EQ(f.wanted, 2u);
    EXPECT_EQ(f.ready + f.to_create, 0u);
    EXPECT_EQ(f.reason, Reason::NoParent);
    EXPECT_NE(f.fix.find("modprobe mbochs"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("/sys/class/mdev_bus"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
    // The [[mdev]] entry is an allowlist of its own.
    EXPECT_EQ(dx.checks[2].detail, "1 [[mdev]] entry");
}

// A selector that reaches no parent puts nothing in the plan; doctor still reports the entry.
TEST_F(DoctorMdev, ASelectorReachingNoParentIsNoParent) {
    MdevFinding f = only_mdev(
        diagnose_with("[[mdev]]\nselector = \"10de:2236\"\ntype = \"nvidia-1\"\ncount = 3\n"));
    EXPECT_EQ(f.parent, "selector 10de:2236");
    EXPECT_EQ(f.wanted, 3u);
    EXPECT_EQ(f.reason, Reason::NoParent);
}

TEST_F(DoctorMdev, AnUnknownTypeListsTheParentsTypes) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-huge", 1));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.reason, Reason::UnknownType);
    for (const char* t : {"mbochs-small", "mbochs-medium", "mbochs-large"})
        EXPECT_NE(f.fix.find(t), std::string::npos) << t << ": " << f.fix;
    EXPECT_NE(f.fix.find("systemctl reload vfiod"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
}

// mbochs has 256 MB and a large one takes 64: four fit, five are wanted, none is made.
TEST_F(DoctorMdev, TooFewInstancesGiveTheNumbersAndTheCountThatFits) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-large", 5));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.reason, Reason::MdevUnavailable);
    EXPECT_EQ(f.wanted, 5u);
    EXPECT_EQ(f.to_create, 0u);
    ASSERT_FALSE(f.details.empty());
    EXPECT_NE(f.fix.find("has 4 available_instances, 5 more wanted"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("at most 4"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("share its budget"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("systemctl reload vfiod"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
}

// Mdevs made by hand take the whole budget: the type has none left, and the fix says so.
TEST_F(DoctorMdev, NoInstancesLeftSaysOtherMdevsTakeTheBudget) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    for (int i = 0; i < 4; ++i)
        create("mbochs-large", "83b8f4f2-509f-482f-bc1e-e6bfe0fa100" + std::to_string(i));
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-small", 1));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.reason, Reason::MdevUnavailable);
    EXPECT_NE(f.fix.find("available_instances 0"), std::string::npos) << f.fix;
    EXPECT_NE(f.fix.find("to 0"), std::string::npos) << f.fix;
    EXPECT_FALSE(dx.healthy);
}

// Health waits for the mdevs themselves: planned is not enough, made is.
TEST_F(DoctorMdev, APairIsHealthyOnceAllItsMdevsAreReady) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    create("mbochs-small", mdev_uuid("mbochs", "mbochs-small", 0));
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-small", 2));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.ready, 1u);
    EXPECT_EQ(f.to_create, 1u);
    EXPECT_EQ(f.reason, Reason::None);
    EXPECT_EQ(f.fix, "");
    EXPECT_FALSE(dx.healthy);

    create("mbochs-small", mdev_uuid("mbochs", "mbochs-small", 1));
    dx = diagnose_with(entry("mbochs", "mbochs-small", 2));
    f = only_mdev(dx);
    EXPECT_EQ(f.type_name, "mbochs-small");
    EXPECT_EQ(f.ready, 2u);
    EXPECT_EQ(f.to_create, 0u);
    for (const auto& c : dx.checks)
        EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
    EXPECT_TRUE(dx.healthy);
}

// DESIGN §13: a pair whose parent vfiod reports failed is not ready, however many mdevs it has;
// the parent is never bound, so a reload, not a bind, clears it. Degraded is a note.
TEST_F(DoctorMdev, APairOnAFailedParentIsNotReadyAndAReloadClearsIt) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    create("mbochs-small", mdev_uuid("mbochs", "mbochs-small", 0));
    DaemonHealth health;
    health.mdev_parents["mbochs"] = {"failed", "gone: config space reads all ones"};
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-small", 1), health);
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.ready, f.wanted);
    EXPECT_FALSE(dx.healthy);
    EXPECT_EQ(f.health.reason, "gone: config space reads all ones");
    for (const char* what : {"reseat the card", "systemctl reload vfiod"})
        EXPECT_NE(f.health_fix.find(what), std::string::npos) << what << ": " << f.health_fix;
    EXPECT_EQ(f.health_fix.find("vfioctl bind"), std::string::npos) << f.health_fix;

    health.mdev_parents["mbochs"] = {"degraded", "aer-nonfatal: 1 since start"};
    dx = diagnose_with(entry("mbochs", "mbochs-small", 1), health);
    EXPECT_TRUE(dx.healthy);
    EXPECT_NE(only_mdev(dx).health_fix.find("watch the counts"), std::string::npos);
}

// One of vfiod's own above the count, held by a VM: the pair still has what it wants, and the
// fix names the holder's way out.
TEST_F(DoctorMdev, AnOwnMdevInUseAboveTheCountNamesItsHolder) {
    kernel->register_mdev_parent(vfiod::test::mbochs_parent());
    create("mbochs-small", mdev_uuid("mbochs", "mbochs-small", 0));
    const std::string extra = mdev_uuid("mbochs", "mbochs-small", 1);
    create("mbochs-small", extra);
    auto group = kernel->resolve("sys/bus/mdev/devices/" + extra + "/iommu_group");
    ASSERT_TRUE(group);
    tree.write_file("proc/4242/comm", "qemu-system-x86\n");
    tree.symlink("proc/4242/fd/30", "/dev/vfio/" + group->substr(group->rfind('/') + 1));
    Diagnosis dx = diagnose_with(entry("mbochs", "mbochs-small", 1));
    MdevFinding f = only_mdev(dx);
    EXPECT_EQ(f.wanted, 1u);
    EXPECT_EQ(f.ready, 1u);
    EXPECT_EQ(f.reason, Reason::InUseMdev);
    ASSERT_EQ(f.details.size(), 1u);
    EXPECT_EQ(f.details[0].rfind(extra + ": ", 0), 0u) << f.details[0];
    EXPECT_NE(f.details[0].find("qemu-system-x86"), std::string::npos) << f.details[0];
    EXPECT_NE(f.fix.find("close the VM"), std::string::npos) << f.fix;
    EXPECT_TRUE(dx.healthy);  // what it wants is there; the extra one waits
}

// Every type a parent has, named as its name file says when that differs from the directory.
TEST_F(DoctorMdev, AnUnknownTypeOnMttyShowsTheTypesNames) {
    kernel->register_mdev_parent(vfiod::test::mtty_parent());
    MdevFinding f = only_mdev(diagnose_with(entry("mtty", "mtty-4", 1)));
    EXPECT_NE(f.fix.find("mtty-1 (Single port serial), mtty-2 (Dual port serial)"),
              std::string::npos)
        << f.fix;
}

}  // namespace
}  // namespace vfiod::cli
