// Issue 20, finding 2: reconciliation acts only on journal entries the host still agrees with.
// A stale or forged run/vfiod entry (an address reused after hot-unplug, a test tree's run
// written into the live /run) must not make vfiod unbind the root disk, re-drive a routed NIC or
// write to a bridge: every function an unfinished entry names is checked against the host as it
// is now and against the DESIGN §4 rules before the first write; an entry that fails is named,
// left alone and discarded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "exec_world.hpp"
#include "io/config_loader.hpp"
#include "scenarios.hpp"

using namespace vfiod;
using namespace vfiod::test::world;
using vfiod::test::build_gpu_host;

namespace {

const char* kNvme = "0000:02:00.0";  // gpu-host: the mounted root disk, group 14
const char* kEno1 = "0000:00:1f.6";  // gpu-host: the routed onboard NIC, group 9

std::string fn_line(const char* bdf, const std::string& before, const std::string& before_override,
                    const std::string& target = "vfio-pci", const std::string& original = "") {
    return std::string("function ") + bdf + " original=" + original + " before=" + before +
           " before_override=" + before_override + " target=" + target + "\n";
}

std::string entry_text(unsigned group, const char* op, const std::string& functions,
                       bool released = false) {
    return "vfiod-journal 1\ngroup " + std::to_string(group) + "\nop " + op +
           "\nphase started\nreleased " + (released ? "1" : "0") + "\n" + functions;
}

// The demo host of the integration tests, under the fake kernel, with its own config plus a
// [[protect]] entry for the root disk's model, as an administrator would write it.
struct GpuHost {
    test::FakeTree tree;
    std::unique_ptr<test::FakeKernel> kernel;
    std::unique_ptr<Journal> journal;
    std::unique_ptr<Executor> exec;
    Config config;

    GpuHost() {
        build_gpu_host(tree);
        tree.write_file("etc/vfiod/conf.d/protect.toml", "[[protect]]\nselector = \"144d:a808\"\n");
        ConfigResult r = load_config(tree.root(), std::nullopt);
        EXPECT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors.front());
        if (r.config)
            config = *r.config;
        kernel = std::make_unique<test::FakeKernel>(tree);
        journal = std::make_unique<Journal>(*kernel);
        exec = std::make_unique<Executor>(*kernel, journal.get(), 5s);
    }
    std::string driver(const char* bdf) const {
        return kernel->link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver")
            .value_or("");
    }
    std::string override_of(const char* bdf) const {
        return kernel->read(std::string("sys/bus/pci/devices/") + bdf + "/driver_override")
            .value_or("?");
    }
};

std::vector<GroupOutcome> reconcile(Executor& exec, const Config& config) {
    return exec.reconcile(config);
}

bool mentions(const std::string& text, const std::string& what) {
    return text.find(what) != std::string::npos;
}

}  // namespace

// Repro 1: an unfinished group-13 bind naming the mounted, protected root NVMe. Unfixed, the
// rollback wrote 0000:02:00.0 to drivers/nvme/unbind.
TEST(JournalCheck, AnEntryNamingTheMountedProtectedRootDiskWritesNothing) {
    GpuHost h;
    h.tree.write_file("run/vfiod/group-13", entry_text(13, "bind", fn_line(kNvme, "", "")));
    auto outs = reconcile(*h.exec, h.config);
    EXPECT_TRUE(h.kernel->writes().empty()) << h.kernel->writes().front().path;
    EXPECT_EQ(h.driver(kNvme), "nvme");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].state, Outcome::Refused);
    EXPECT_EQ(outs[0].blockers, std::vector<PciAddress>{A(kNvme)});
    const std::string& m = outs[0].message;
    EXPECT_TRUE(mentions(m, "0000:02:00.0: not a member of IOMMU group 13 (its group is 14)")) << m;
    EXPECT_TRUE(mentions(m, "0000:02:00.0: protected: matches a [[protect]] entry")) << m;
    EXPECT_TRUE(mentions(m, "in-use-storage: nvme0n1p2 (259:2) is mounted on /")) << m;
    // Discarded: nothing left to act on at the next start.
    EXPECT_FALSE(h.journal->load(13));
    EXPECT_TRUE(reconcile(*h.exec, h.config).empty());
}

// Repro 2: an entry for a group that does not exist, naming the routed NIC, with an override to
// "restore". Unfixed, the NIC was unbound and its driver_override set to snd_hda_intel.
TEST(JournalCheck, AnEntryForAGroupThatDoesNotExistTouchesNothing) {
    GpuHost h;
    h.tree.write_file("run/vfiod/group-999",
                      entry_text(999, "bind", fn_line(kEno1, "", "snd_hda_intel")));
    auto outs = reconcile(*h.exec, h.config);
    EXPECT_TRUE(h.kernel->writes().empty()) << h.kernel->writes().front().path;
    EXPECT_EQ(h.driver(kEno1), "e1000e");
    EXPECT_EQ(h.override_of(kEno1), "(null)");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].state, Outcome::Refused);
    EXPECT_TRUE(mentions(outs[0].message, "0000:00:1f.6: not a member of IOMMU group 999"))
        << outs[0].message;
    EXPECT_TRUE(mentions(outs[0].message, "in-use-network")) << outs[0].message;
    EXPECT_FALSE(h.journal->load(999));
}

// Repro 3: a group-13 entry listing a thousand functions, the group's bridge first. Unfixed,
// driver_override was written on the bridge. Now it is refused outright, before anything is read
// of the functions it names.
TEST(JournalCheck, AnEntryNamingMoreFunctionsThanAGroupCanHaveIsRefusedOutright) {
    World w;
    std::string fns = "function " + std::string(kPort) + " before_override=x\n";
    for (int i = 0; i < 999; ++i) {
        char line[64];
        std::snprintf(line, sizeof line, "function 0000:%02x:%02x.%x before_override=x\n",
                      0x40 + i / 256, (i / 8) % 32, i % 8);
        fns += line;
    }
    w.tree.write_file("run/vfiod/group-13", entry_text(13, "bind", fns));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty()) << w.kernel->writes().front().path;
    expect_original(w);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "names more than 256 functions")) << outs[0].message;
}

// Within the bound but more than the group has: refused outright too, nothing written.
TEST(JournalCheck, AnEntryNamingMoreFunctionsThanTheGroupHasIsRefused) {
    World w;
    std::string fns = fn_line(kGpu, "nvidia", "") + fn_line(kAudio, "snd_hda_intel", "") +
                      fn_line("0000:01:00.2", "", "") + fn_line("0000:01:00.3", "", "");
    w.tree.write_file("run/vfiod/group-13", entry_text(13, "bind", fns));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].state, Outcome::Refused);
    EXPECT_TRUE(mentions(outs[0].message, "names 4 functions; IOMMU group 13 has 3"))
        << outs[0].message;
    EXPECT_FALSE(w.journal->load(13));
}

// A bridge of the group itself: vfiod never writes to bridges, so an entry naming one is not its.
TEST(JournalCheck, AnEntryNamingTheGroupsBridgeIsDiscarded) {
    World w;
    w.tree.write_file("run/vfiod/group-13", entry_text(13, "bind", fn_line(kPort, "", "")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    EXPECT_EQ(w.driver(kPort), "pcieport");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:00:1c.0: a bridge")) << outs[0].message;
}

// The function moved: the entry says group 13, its iommu_group link says 14 now (re-plugged
// elsewhere, or a different device at a reused address).
TEST(JournalCheck, AFunctionThatMovedToAnotherGroupIsLeftAlone) {
    World w;
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "bind", fn_line(kGpu, "nvidia", "") + fn_line(kNic, "", "")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    EXPECT_EQ(w.driver(kNic), "igb");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message,
                         "0000:02:00.0: not a member of IOMMU group 13 (its group is 14)"))
        << outs[0].message;
}

// The same function twice: vfiod never writes that, and acting on it would write twice.
TEST(JournalCheck, AFunctionNamedTwiceIsRefused) {
    World w;
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "bind", fn_line(kGpu, "", "") + fn_line(kGpu, "", "")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    EXPECT_EQ(w.driver(kGpu), "nvidia");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:01:00.0: named twice")) << outs[0].message;
}

// A bind entry whose function carries an override that is neither the journaled target nor what
// it had before: someone else's doing (driverctl, an admin), not an interrupted bind of vfiod's.
TEST(JournalCheck, ABindEntryWhoseOverrideIsSomeoneElsesIsLeftAlone) {
    World w;
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "bind", fn_line(kGpu, "", "") + fn_line(kAudio, "", "")));
    auto outs = reconcile(*w.exec, w.config);
    // The GPU is on nvidia with no override: neither what the entry says it had ("" before) nor
    // the vfio target: not a state vfiod's writes leave.
    EXPECT_TRUE(w.kernel->writes().empty());
    expect_original(w);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:01:00.0: bind entry: driver is 'nvidia'"))
        << outs[0].message;
}

// A bind entry whose target is not where vfiod binds that function (the config's driver, or
// vfio-pci): an override to "restore" would hand the device to whatever driver it names.
TEST(JournalCheck, ABindEntryWithAForeignTargetIsLeftAlone) {
    World w;
    w.kernel->write(std::string("sys/bus/pci/devices/") + kGpu + "/driver_override", "nouveau");
    size_t before = w.kernel->writes().size();
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "bind", fn_line(kGpu, "nvidia", "", "nouveau")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_EQ(w.kernel->writes().size(), before);
    EXPECT_EQ(w.driver(kGpu), "nvidia");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(
        mentions(outs[0].message, "target 'nouveau' is not where vfiod binds it ('vfio-pci')"))
        << outs[0].message;
}

// A release entry naming a function on a host driver it never left: finishing the "release"
// would unbind it. Only functions on (or leaving) vfiod's target, driverless, or home pass.
TEST(JournalCheck, AReleaseEntryForAFunctionOnAHostDriverIsLeftAlone) {
    World w;
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "release",
                                 fn_line(kGpu, "nvidia", "", "", "nvidia") +
                                     fn_line(kAudio, "snd_hda_intel", "snd_hda_intel", "", ""),
                                 true));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    expect_original(w);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "release entry")) << outs[0].message;
    // The released mark it carried goes with it: vfiod sets the mark only on an entry it has
    // finished, so an unfinished entry carrying one is not vfiod's record of anything.
    EXPECT_FALSE(w.exec->released(13));
}

// What the checks must let through: vfiod's own release, interrupted before its first write.
TEST(JournalCheck, AReleaseEntryStillFinishesAGenuineInterruptedRelease) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    // Crash right after the release stored its entry, before its first write.
    auto bound = w.journal->load(13);
    ASSERT_TRUE(bound);
    JournalEntry e = *bound;
    e.op = JournalEntry::Op::Release;
    e.phase = JournalEntry::Phase::Started;
    for (auto& f : e.functions) {
        f.before = "vfio-pci";
        f.before_override = "vfio-pci";
        f.target = f.original;
    }
    ASSERT_EQ(w.journal->store(e), 0);
    w.start();
    auto outs = reconcile(*w.exec, w.config);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].state, Outcome::Released) << outs[0].message;
    expect_original(w);
    EXPECT_TRUE(w.exec->released(13));
}

// A VF of another PF, claimed for the PF's group: VFs sit in groups of their own, so it is not a
// member, and the PF (whose unbind would destroy its VFs) is refused by the sriov-pf rule too.
TEST(JournalCheck, AnEntryNamingAVfOfAnotherPfIsLeftAlone) {
    World w(World::kEmpty);
    build_host(w.tree);
    test::FakeTree::Function pf = test::FakeTree::pci("0000:05:00.0", "8086", "1572", "020000",
                                                      "i40e", 20);
    pf.sriov_totalvfs = 4;
    pf.sriov_numvfs = 1;
    w.tree.add_function(pf);
    test::FakeTree::Function vf = test::FakeTree::pci("0000:05:02.0", "8086", "154c", "020000",
                                                      "iavf", 21);
    vf.physfn = "0000:05:00.0";
    w.tree.add_function(vf);
    w.start();
    w.tree.write_file("run/vfiod/group-20",
                      entry_text(20, "bind", fn_line("0000:05:00.0", "", "") +
                                                 fn_line("0000:05:02.0", "", "")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    EXPECT_EQ(w.driver("0000:05:00.0"), "i40e");
    EXPECT_EQ(w.driver("0000:05:02.0"), "iavf");
    ASSERT_EQ(outs.size(), 1u);
    const std::string& m = outs[0].message;
    // Group 20 has one member; the entry names two: refused outright.
    EXPECT_TRUE(mentions(m, "names 2 functions; IOMMU group 20 has 1")) << m;

    w.tree.write_file("run/vfiod/group-20",
                      entry_text(20, "bind", fn_line("0000:05:02.0", "", "")));
    outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message,
                         "0000:05:02.0: not a member of IOMMU group 20 (its group is 21)"))
        << outs[0].message;

    w.tree.write_file("run/vfiod/group-20",
                      entry_text(20, "bind", fn_line("0000:05:00.0", "", "")));
    outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:05:00.0: sriov-pf: SR-IOV PF with 1 VFs enabled"))
        << outs[0].message;
}

// A function that is gone (hot-unplugged since the entry was written) is not a member either:
// the entry is discarded and the rest of the group is left as it is, never half rolled back.
TEST(JournalCheck, AnEntryNamingAFunctionThatIsGoneIsDiscarded) {
    World w;
    w.tree.write_file("run/vfiod/group-13",
                      entry_text(13, "bind", fn_line(kGpu, "nvidia", "") +
                                                 fn_line("0000:01:00.3", "", "")));
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:01:00.3: not found")) << outs[0].message;
    EXPECT_FALSE(w.journal->load(13));
}

// A release entry for a group a VM holds open: finishing it would unbind vfio-pci from under the
// VM (the unbind blocks until the VM lets go). in-use-vfio, as plan_release() refuses it.
TEST(JournalCheck, AReleaseEntryForAGroupAVmHoldsIsLeftAlone) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    JournalEntry e = *w.journal->load(13);
    e.op = JournalEntry::Op::Release;
    e.phase = JournalEntry::Phase::Started;
    for (auto& f : e.functions) {
        f.before = f.before_override = "vfio-pci";
        f.target = f.original;
    }
    ASSERT_EQ(w.journal->store(e), 0);
    w.tree.write_file("proc/4242/comm", "qemu-system-x86\n");
    w.tree.symlink("proc/4242/fd/17", "/dev/vfio/13");
    w.start();
    auto outs = reconcile(*w.exec, w.config);
    EXPECT_TRUE(w.kernel->writes().empty());
    expect_bound(w);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(mentions(outs[0].message, "0000:01:00.0: in-use-vfio:")) << outs[0].message;
    EXPECT_TRUE(mentions(outs[0].message, "qemu-system-x86")) << outs[0].message;
}
