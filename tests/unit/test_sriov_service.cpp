// The daemon's SR-IOV side (DESIGN §11) on the fake kernel's sriov-host: the service creates a
// PF's VFs at coldplug and on the PF's add event, binds the allowlisted ones and sends the others
// to their host driver, never lets a VF meet a host driver on the way, refuses a count change
// while a VF is open and tries it again on Reload, survives a write that hangs, and settles a
// crash. The test is the event loop: it hands the kernel's uevents to the service, burst by
// burst, and publishes after each, as run_event_loop does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <poll.h>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "scenarios.hpp"
#include "infra/workers.hpp"
#include "service/service.hpp"

namespace vfiod::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const char* kVf0 = "0000:02:00.1";
const char* kVf1 = "0000:02:00.2";
const std::string kPfDir = std::string("sys/bus/pci/devices/") + kSriovPf + "/";

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

std::string config(unsigned num_vfs, const std::string& devices) {
    return devices + "[[sriov]]\naddress = \"" + kSriovPf + "\"\nnum_vfs = " +
           std::to_string(num_vfs) + "\n";
}
// The VFs allowlisted by address: the PF and its VFs share 1b36:0010.
const std::string kFirstVf = std::string("[[device]]\naddress = \"") + kVf0 + "\"\n\n";
const std::string kBothVfs =
    kFirstVf + std::string("[[device]]\naddress = \"") + kVf1 + "\"\n\n";

class SriovService : public ::testing::Test {
protected:
    SriovService() {
        build_sriov_host(tree);
        kernel = std::make_unique<FakeKernel>(tree);
        kernel->on_uevent([this](const std::string& action, const std::string& bdf) {
            std::lock_guard lock(m);
            events.insert(bdf);
            if (action == "bind")  // every driver a function ever had
                drivers_seen[bdf].insert(driver(bdf));
        });
    }
    void write_config(const std::string& toml) { tree.write_file("etc/vfiod/vfiod.toml", toml); }
    std::string driver(const std::string& bdf) const {
        return kernel->link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver")
            .value_or("");
    }
    std::string read(const std::string& rel) const { return kernel->read(rel).value_or("?"); }
    // Hands the uevents raised so far to the service until none come: a daemon reacting to its
    // own writes' events must settle, so a burst count past a few is a loop.
    void pump(Service& s) {
        s.publish();
        for (int round = 0; round < 8; ++round) {
            std::set<std::string> burst;
            {
                std::lock_guard lock(m);
                burst.swap(events);
            }
            if (burst.empty())
                return;
            std::set<PciAddress> touched;
            for (const auto& b : burst)
                touched.insert(addr(b.c_str()));
            s.handle_events(touched);
            s.publish();
        }
        ADD_FAILURE() << "the service kept raising events of its own";
    }
    std::set<std::string> seen(const std::string& bdf) {
        std::lock_guard lock(m);
        return drivers_seen[bdf];
    }
    const PfInfo& pf(const Service& s) {
        static const PfInfo none;
        auto it = s.inventory().pfs.find(addr(kSriovPf));
        EXPECT_NE(it, s.inventory().pfs.end()) << "PF not published";
        return it == s.inventory().pfs.end() ? none : it->second;
    }
    size_t writes_to(const std::string& file) const {
        size_t n = 0;
        for (const auto& w : kernel->writes())
            n += w.path == kPfDir + file;
        return n;
    }
    // A VM holding the VF's group open, as QEMU does through /dev/vfio/<group>.
    void vm_opens(unsigned group) {
        tree.write_file("proc/4242/comm", "qemu-system-x86\n");
        tree.symlink("proc/4242/fd/30", "/dev/vfio/" + std::to_string(group));
    }
    void vm_closes() { tree.remove("proc/4242"); }

    FakeTree tree;
    // What the uevent sink fills: before the kernel, so they outlive it (a write the executor
    // left blocked returns, and raises its uevents, while the kernel goes).
    std::mutex m;
    std::set<std::string> events;
    std::map<std::string, std::set<std::string>> drivers_seen;
    std::unique_ptr<FakeKernel> kernel;
};

// Coldplug: both VFs made with autoprobe off, the allowlisted one bound to vfio-pci, the other
// sent to nvme; neither ever had another driver, the PF keeps nvme and is published ready.
TEST_F(SriovService, ColdplugCreatesTheVfsBindsTheAllowlistedAndProbesTheOthers) {
    write_config(config(2, kFirstVf));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "2");
    EXPECT_EQ(read(kPfDir + "sriov_drivers_autoprobe"), "1");
    EXPECT_EQ(driver(kVf0), "vfio-pci");
    EXPECT_EQ(driver(kVf1), "nvme");
    EXPECT_THAT(seen(kVf0), ElementsAre("vfio-pci"));
    EXPECT_THAT(seen(kVf1), ElementsAre("nvme"));
    EXPECT_EQ(driver(kSriovPf), "nvme");
    EXPECT_EQ(pf(s).state, PfState::Ready);
    EXPECT_EQ(pf(s).num_vfs, 2u);
    EXPECT_EQ(pf(s).wanted_vfs, 2u);
    EXPECT_EQ(pf(s).total_vfs, 2u);
    EXPECT_EQ(s.inventory().groups.at(8).state, GroupState::Bound);
    EXPECT_EQ(s.inventory().groups.count(9), 0u);  // left to the host: not vfiod's
    // A restart finds everything in place: nothing is written.
    size_t before = kernel->writes().size();
    Service again(*kernel, {});
    ASSERT_TRUE(again.start());
    pump(again);
    EXPECT_EQ(kernel->writes().size(), before);
    EXPECT_EQ(pf(again).state, PfState::Ready);
}

// The PF's VFs carry its own vendor:device, and one selector allowlists that ID: the VFs are
// bound, the PF never (sriov-pf), and no VF ever reaches nvme, which matches them.
TEST_F(SriovService, AVfWithThePfsOwnIdIsBoundAndThePfNever) {
    write_config("[[device]]\nselector = \"1b36:0010\"\n\n" + config(2, ""));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_EQ(driver(kSriovPf), "nvme");
    EXPECT_EQ(s.inventory().groups.at(7).state, GroupState::Refused);
    EXPECT_EQ(s.inventory().groups.at(7).reason, Reason::SriovPf);
    for (const char* vf : {kVf0, kVf1}) {
        EXPECT_EQ(driver(vf), "vfio-pci") << vf;
        EXPECT_THAT(seen(vf), ElementsAre("vfio-pci")) << vf;
    }
}

// A reload that changes num_vfs goes through 0 (the kernel refuses 1 -> 2), and the new VFs are
// bound as they come.
TEST_F(SriovService, AReloadThatRaisesNumVfsGrowsThroughZero) {
    write_config(config(1, kBothVfs));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    ASSERT_EQ(read(kPfDir + "sriov_numvfs"), "1");
    ASSERT_EQ(driver(kVf0), "vfio-pci");
    write_config(config(2, kBothVfs));
    ASSERT_TRUE(s.reload().ok());
    pump(s);
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "2");
    EXPECT_EQ(driver(kVf0), "vfio-pci");
    EXPECT_EQ(driver(kVf1), "vfio-pci");
    EXPECT_THAT(seen(kVf1), ElementsAre("vfio-pci"));
    EXPECT_EQ(pf(s).state, PfState::Ready);
    for (const auto& w : kernel->writes()) {
        if (w.path == kPfDir + "sriov_numvfs") {
            EXPECT_EQ(w.result, 0) << w.value;
        }
    }
}

// A VM holding a VF stops a count change (it would destroy the VF): refused in-use-vf with the
// VF named, and nothing written, on the reload and on the VF's own events; once the VM lets go,
// the next Reload makes the change.
TEST_F(SriovService, AChangeWaitsForTheVmToLetGoAndGoesThroughOnReload) {
    write_config(config(2, kBothVfs));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    ASSERT_EQ(driver(kVf0), "vfio-pci");
    vm_opens(8);
    write_config(config(1, kBothVfs));
    const size_t before = writes_to("sriov_numvfs");
    ASSERT_TRUE(s.reload().ok());
    pump(s);
    EXPECT_EQ(pf(s).state, PfState::Refused);
    EXPECT_EQ(pf(s).reason, Reason::InUseVf);
    EXPECT_THAT(pf(s).blockers, ElementsAre(addr(kVf0)));
    EXPECT_EQ(pf(s).num_vfs, 2u);
    EXPECT_EQ(pf(s).wanted_vfs, 1u);
    s.handle_events({addr(kVf1)});  // an event of a VF: tried again, still refused
    pump(s);
    EXPECT_EQ(pf(s).state, PfState::Refused);
    EXPECT_EQ(writes_to("sriov_numvfs"), before);
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "2");

    vm_closes();  // no event says so: vfiod never polls
    s.publish();
    EXPECT_EQ(pf(s).state, PfState::Refused);
    ASSERT_TRUE(s.reload().ok());
    pump(s);
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "1");
    EXPECT_EQ(pf(s).state, PfState::Ready);
    EXPECT_EQ(driver(kVf0), "vfio-pci");
    EXPECT_FALSE(kernel->exists(std::string("sys/bus/pci/devices/") + kVf1));
}

// An operator's Release is one of the retries too: the VM has gone, the refused change follows
// the Release, before (here: without) any event the Release raises.
TEST_F(SriovService, ARefusedChangeIsTriedAgainAfterARelease) {
    write_config(config(2, kBothVfs));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    vm_opens(9);
    write_config(config(0, kBothVfs));
    ASSERT_TRUE(s.reload().ok());
    pump(s);
    ASSERT_EQ(pf(s).state, PfState::Refused);
    vm_closes();
    ASSERT_TRUE(s.release(kVf0).ok());
    {
        std::lock_guard lock(m);
        events.clear();
    }
    s.publish();
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "0");
    EXPECT_EQ(pf(s).state, PfState::Ready);
    EXPECT_EQ(pf(s).num_vfs, 0u);
    pump(s);
}

// A PF hot-plugged after the start gets its VFs from its add event.
TEST_F(SriovService, AHotPluggedPfGetsItsVfs) {
    write_config(config(2, kBothVfs));
    kernel->remove_function(kSriovPf);
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_TRUE(s.inventory().pfs.empty());
    FakeTree::Function fn = FakeTree::pci(kSriovPf, "1b36", "0010", "010802", "nvme", 7,
                                          "0000:00:04.0");
    fn.sriov_totalvfs = 2;
    kernel->hot_add(fn);
    pump(s);
    EXPECT_EQ(driver(kSriovPf), "nvme");
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "2");
    EXPECT_EQ(driver(kVf0), "vfio-pci");
    EXPECT_EQ(driver(kVf1), "vfio-pci");
    EXPECT_THAT(seen(kVf0), ElementsAre("vfio-pci"));
    EXPECT_EQ(pf(s).state, PfState::Ready);
}

// A driverless PF cannot make VFs (ENOENT): failed, and tried again when its driver binds.
TEST_F(SriovService, ADriverlessPfFailsAndIsTriedAgainOnItsBindEvent) {
    write_config(config(2, kBothVfs));
    ASSERT_EQ(kernel->write(kPfDir + "driver/unbind", kSriovPf), 0);
    {
        std::lock_guard lock(m);
        events.clear();
    }
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_EQ(pf(s).state, PfState::Failed);
    EXPECT_EQ(pf(s).reason, Reason::WriteFailed);
    EXPECT_EQ(read(kPfDir + "sriov_numvfs"), "0");
    ASSERT_EQ(kernel->write("sys/bus/pci/drivers/nvme/bind", kSriovPf), 0);
    pump(s);
    EXPECT_EQ(pf(s).state, PfState::Ready);
    EXPECT_EQ(driver(kVf0), "vfio-pci");
    EXPECT_EQ(driver(kVf1), "vfio-pci");
}

// A sriov_numvfs write that blocks (some PF drivers take seconds per VF, or never answer) is
// given up on after write_timeout: the PF is failed (stuck), the start goes on, and nothing more
// is written to it while the write stays blocked.
TEST_F(SriovService, ANumVfsWriteThatHangsIsContained) {
    write_config("[daemon]\nwrite_timeout = 1\n\n" + config(2, kBothVfs));
    kernel->block_path(kPfDir + "sriov_numvfs");
    Service s(*kernel, {});
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
    EXPECT_EQ(pf(s).state, PfState::Failed);
    EXPECT_EQ(pf(s).reason, Reason::Stuck);
    const size_t before = kernel->writes().size();
    ASSERT_TRUE(s.reload().ok());
    pump(s);
    EXPECT_EQ(pf(s).reason, Reason::Stuck);
    EXPECT_EQ(kernel->writes().size(), before);
    kernel->unblock();
}

// As the daemon runs it: the writes on worker threads, the uevents they raise heard on the loop
// while other operations run. The PF's change, the VF binds and the probe all land.
TEST_F(SriovService, WithWorkersAsTheDaemonRunsIt) {
    write_config(config(2, kFirstVf));
    Service s(*kernel, {});
    Workers w;  // after the service: it goes first, waiting for the jobs that use the service
    s.set_workers(&w);
    ASSERT_TRUE(s.start());
    auto settled = [&] {
        return driver(kVf0) == "vfio-pci" && driver(kVf1) == "nvme" &&
               s.inventory().pfs.count(addr(kSriovPf)) &&
               s.inventory().pfs.at(addr(kSriovPf)).state == PfState::Ready &&
               s.inventory().pfs.at(addr(kSriovPf)).num_vfs == 2 &&
               s.inventory().groups.count(8) &&
               s.inventory().groups.at(8).state == GroupState::Bound && !s.busy(9);
    };
    for (int i = 0; i < 1000 && !settled(); ++i) {
        pollfd p{w.fd(), POLLIN, 0};
        if (::poll(&p, 1, 10) > 0)
            w.dispatch();
        std::set<std::string> burst;
        {
            std::lock_guard lock(m);
            burst.swap(events);
        }
        std::set<PciAddress> touched;
        for (const auto& b : burst)
            touched.insert(addr(b.c_str()));
        if (!touched.empty())
            s.handle_events(touched);
        s.publish();
    }
    EXPECT_TRUE(settled());
    EXPECT_THAT(seen(kVf0), ElementsAre("vfio-pci"));
    EXPECT_THAT(seen(kVf1), ElementsAre("nvme"));
}

// Observe mode writes nothing: the PF is pending with the change it would make.
TEST_F(SriovService, ObserveModeOnlySaysWhatItWouldWrite) {
    write_config("[daemon]\nmode = \"observe\"\n\n" + config(2, kBothVfs));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_THAT(kernel->writes(), IsEmpty());
    EXPECT_EQ(pf(s).state, PfState::Pending);
    EXPECT_EQ(pf(s).num_vfs, 0u);
}

// A crash between sriov_numvfs <- 2 and autoprobe <- 1: the VFs exist, driverless, their add
// events never heard. The next start settles the journal entry, binds the allowlisted VF, puts
// autoprobe back and sends the other VF to its host driver.
TEST_F(SriovService, ACrashAfterTheCountIsSettledOnTheNextStart) {
    write_config(config(2, kFirstVf));
    FakeTree crashed;
    kernel->before_step([&](unsigned, const std::string& rel) {
        if (rel == kPfDir + "sriov_drivers_autoprobe" && read(kPfDir + "sriov_numvfs") == "2")
            std::filesystem::copy(tree.root(), crashed.root(),
                                  std::filesystem::copy_options::recursive |
                                      std::filesystem::copy_options::copy_symlinks |
                                      std::filesystem::copy_options::overwrite_existing);
    });
    {
        Service s(*kernel, {});
        ASSERT_TRUE(s.start());
    }
    const std::string entry = crashed.root() + "/run/vfiod/pf-" + kSriovPf;
    ASSERT_TRUE(std::filesystem::exists(entry));
    FakeKernel restarted(crashed);
    ASSERT_EQ(restarted.read(kPfDir + "sriov_drivers_autoprobe"), "0");
    Service s(restarted, {});
    ASSERT_TRUE(s.start());
    s.publish();
    auto drv = [&](const char* bdf) {
        return restarted.link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver")
            .value_or("");
    };
    EXPECT_FALSE(std::filesystem::exists(entry));
    EXPECT_EQ(restarted.read(kPfDir + "sriov_drivers_autoprobe"), "1");
    EXPECT_EQ(drv(kVf0), "vfio-pci");
    EXPECT_EQ(drv(kVf1), "nvme");
    EXPECT_EQ(s.inventory().pfs.at(addr(kSriovPf)).state, PfState::Ready);
}

// Issue 37's host at start: the PF protected, no [[sriov]] entry, its first VF carrying the
// default route, and an entry of an interrupted 0 -> 2 change (a crash, then the operator
// removed the [[sriov]] entry and protected the PF; or a planted file). The daemon must not take
// the PF back to 0 VFs: nothing is written to it, the entry goes, and the next start is quiet.
TEST(SriovServiceStart, AJournalEntryNeverDestroysTheVfsOfAProtectedPf) {
    FakeTree tree;
    build_sriov_routed_vf(tree);
    tree.write_file("etc/vfiod/vfiod.toml",
                    std::string("[[protect]]\naddress = \"") + kSriovPf + "\"\n");
    const std::string entry = "run/vfiod/pf-" + std::string(kSriovPf);
    tree.write_file(entry, "vfiod-pf-journal 1\npf 0000:02:00.0\nfrom 0\nto 2\nphase started\n");
    FakeKernel kernel(tree);
    {
        Service s(kernel, {});
        ASSERT_TRUE(s.start());
        s.publish();
    }
    for (const auto& w : kernel.writes())
        EXPECT_EQ(w.path.find(kPfDir), std::string::npos) << w.path << " <- " << w.value;
    EXPECT_EQ(kernel.read(kPfDir + "sriov_numvfs").value_or("?"), "2");
    EXPECT_TRUE(kernel.exists(std::string("sys/bus/pci/devices/") + kVf0 + "/net/enp2s0v0"));
    EXPECT_FALSE(kernel.exists(entry));
    Service again(kernel, {});
    ASSERT_TRUE(again.start());
    EXPECT_EQ(kernel.read(kPfDir + "sriov_numvfs").value_or("?"), "2");
}

}  // namespace
}  // namespace vfiod::test
