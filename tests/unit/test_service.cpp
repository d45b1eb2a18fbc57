// The service layer (event → re-read → plan → execute → publish) on the fake kernel: enforce
// coldplug, observe mode writing nothing, sticky release across events and restarts, drift
// re-asserted exactly once, early overrides cleared on refused groups, and reloads. The test is
// the event loop here: it publishes after each entry, as run_event_loop does after each dispatch.
#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "eventually.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "scenarios.hpp"
#include "service/service.hpp"
#include "infra/workers.hpp"

namespace vfiod::test {
namespace {

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

std::string driver_of(const FakeKernel& k, const char* bdf) {
    return k.link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver").value_or("");
}

GroupState state_of(const Service& s, unsigned group) {
    auto it = s.inventory().groups.find(group);
    EXPECT_NE(it, s.inventory().groups.end()) << "group " << group << " not published";
    return it == s.inventory().groups.end() ? GroupState::Failed : it->second.state;
}

class ServiceTest : public ::testing::Test {
protected:
    size_t writes() const { return kernel.writes().size(); }

    FakeTree tree;
    // The fake kernel learns each function's native driver when it is made: after the host.
    bool built = (build_gpu_host(tree), true);
    FakeKernel kernel{tree};
};

TEST_F(ServiceTest, EnforceColdplugBindsWholeGroupsAndRefusesTheRootDisk) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    EXPECT_EQ(s.mode(), Mode::Enforce);
    EXPECT_EQ(state_of(s, 13), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "vfio-pci");
    EXPECT_EQ(driver_of(kernel, "0000:01:00.1"), "vfio-pci");
    EXPECT_EQ(state_of(s, 14), GroupState::Refused);
    EXPECT_EQ(s.inventory().groups.at(14).reason, Reason::InUseStorage);
    EXPECT_EQ(driver_of(kernel, "0000:02:00.0"), "nvme");
    // The published view is the kernel's after the writes, with the original driver kept.
    const DeviceInfo& gpu = s.inventory().devices.at(addr("0000:01:00.0"));
    EXPECT_EQ(gpu.driver, "vfio-pci");
    EXPECT_EQ(gpu.original_driver, "nvidia");
    EXPECT_EQ(gpu.role, Role::Allowlisted);
    EXPECT_EQ(s.inventory().devices.at(addr("0000:01:00.1")).role, Role::Companion);
}

// The published device is the planner's record of the function (core/plan.hpp DeviceRecord):
// what sysfs says, NUMA node included, and what the plan made of it.
TEST_F(ServiceTest, PublishedDeviceIsThePlannersRecord) {
    tree.write_file(tree.devpath("0000:01:00.1") + "/numa_node", "1\n");
    Service s(kernel, {.config_file = std::nullopt, .force_observe = true});
    ASSERT_TRUE(s.start());
    const DeviceInfo& audio = s.inventory().devices.at(addr("0000:01:00.1"));
    EXPECT_EQ(audio.numa_node, 1);
    EXPECT_EQ(audio.vendor, 0x10de);
    EXPECT_EQ(audio.device, 0x22a3);
    EXPECT_EQ(audio.class_code, 0x040300u);
    EXPECT_EQ(audio.driver, "snd_hda_intel");
    EXPECT_EQ(audio.role, Role::Companion);
    EXPECT_EQ(audio.target, "vfio-pci");
    EXPECT_EQ(audio.resource_name, std::nullopt);
    EXPECT_EQ(audio.group, 13u);
    const DeviceInfo& gpu = s.inventory().devices.at(addr("0000:01:00.0"));
    EXPECT_EQ(gpu.numa_node, 0);
    EXPECT_EQ(gpu.resource_name, "nvidia.com/GH100_H100_PCIE");
}

TEST_F(ServiceTest, ObserveModeWritesNothingAndShowsPending) {
    Service s(kernel, {.config_file = std::nullopt, .force_observe = true});
    ASSERT_TRUE(s.start());
    EXPECT_EQ(state_of(s, 13), GroupState::Pending);
    EXPECT_EQ(s.inventory().mode, "observe");
    EXPECT_EQ(writes(), 0u);
    EXPECT_EQ(s.bind("0000:01:00.0").code, OpResult::Code::Failed);
    s.publish();
    s.handle_events({addr("0000:01:00.0")});
    s.publish();
    EXPECT_EQ(writes(), 0u);
}

TEST_F(ServiceTest, ReleaseIsStickyAcrossItsOwnEventsAndARestart) {
    {
        Service s(kernel, {});
        ASSERT_TRUE(s.start());
        ASSERT_TRUE(s.release("0000:01:00.1").ok());
        s.publish();
        EXPECT_EQ(state_of(s, 13), GroupState::Released);
        EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "nvidia");
        EXPECT_EQ(driver_of(kernel, "0000:01:00.1"), "snd_hda_intel");
        EXPECT_EQ(kernel.read("sys/bus/pci/devices/0000:01:00.0/driver_override"), "(null)");
        // The unbind/bind uevents the release itself caused must not undo it.
        size_t before = writes();
        s.handle_events({addr("0000:01:00.0"), addr("0000:01:00.1")});
        s.publish();
        EXPECT_EQ(state_of(s, 13), GroupState::Released);
        EXPECT_EQ(writes(), before);
    }
    size_t before = writes();
    Service restarted(kernel, {});
    ASSERT_TRUE(restarted.start());
    EXPECT_EQ(state_of(restarted, 13), GroupState::Released);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "nvidia");
    EXPECT_EQ(writes(), before);
    // Bind is the operator taking it back.
    ASSERT_TRUE(restarted.bind("0000:01:00.0").ok());
    restarted.publish();
    EXPECT_EQ(state_of(restarted, 13), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.1"), "vfio-pci");
}

// Issue 20, finding 2, through the daemon: entries the host does not agree with (a bind of
// group 13 naming the mounted root disk; a group 999 that does not exist naming the routed NIC)
// are discarded at start with nothing written for them; the real group 13 is bound as usual.
TEST_F(ServiceTest, StartDiscardsJournalEntriesTheHostDoesNotAgreeWith) {
    const std::string head = "vfiod-journal 1\nop bind\nphase started\nreleased 0\n";
    tree.write_file("run/vfiod/group-13",
                    head + "group 13\nfunction 0000:02:00.0 original= before= before_override= "
                           "target=vfio-pci\n");
    tree.write_file("run/vfiod/group-999",
                    head + "group 999\nfunction 0000:00:1f.6 original= before= "
                           "before_override=snd_hda_intel target=vfio-pci\n");
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    for (const auto& w : kernel.writes()) {
        EXPECT_EQ(w.path.find("0000:02:00.0"), std::string::npos) << w.path;
        EXPECT_EQ(w.path.find("0000:00:1f.6"), std::string::npos) << w.path;
        EXPECT_NE(w.value, "0000:02:00.0") << w.path;
        EXPECT_NE(w.value, "0000:00:1f.6") << w.path;
    }
    EXPECT_EQ(driver_of(kernel, "0000:02:00.0"), "nvme");
    EXPECT_EQ(driver_of(kernel, "0000:00:1f.6"), "e1000e");
    EXPECT_EQ(kernel.read("sys/bus/pci/devices/0000:00:1f.6/driver_override"), "(null)");
    EXPECT_FALSE(kernel.exists("run/vfiod/group-999"));
    EXPECT_EQ(state_of(s, 13), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "vfio-pci");
}

// Issue 20, finding 3, through the daemon: DIR/run a symlink to a directory outside the tree
// (standing in for the live /run). Nothing is written there; with no journal vfiod binds nothing
// (the journal is written before the first write), and the groups say failed.
TEST_F(ServiceTest, AJournalThatLeadsOutOfTheTreeIsRefusedAndNothingIsWritten) {
    FakeTree outside;
    outside.write_file("run/keep", "");
    tree.remove("run");
    tree.symlink("run", outside.root() + "/run");
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    EXPECT_FALSE(std::filesystem::exists(outside.root() + "/run/vfiod"));
    EXPECT_EQ(state_of(s, 13), GroupState::Failed);
    EXPECT_EQ(s.inventory().groups.at(13).reason, Reason::WriteFailed);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "nvidia");
    EXPECT_TRUE(kernel.writes().empty());
}

TEST_F(ServiceTest, DriftIsReassertedOnceThenReported) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    auto steal = [&] {  // someone writes the GPU's address to nvidia's bind
        tree.unbind("0000:01:00.0");
        tree.bind("0000:01:00.0", "nvidia");
    };
    steal();
    s.handle_events({addr("0000:01:00.0")});
    s.publish();
    EXPECT_EQ(state_of(s, 13), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "vfio-pci");

    steal();
    size_t before = writes();
    s.handle_events({addr("0000:01:00.0")});
    s.publish();
    EXPECT_EQ(state_of(s, 13), GroupState::Failed);
    EXPECT_EQ(s.inventory().groups.at(13).reason, Reason::Drift);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "nvidia");
    EXPECT_EQ(writes(), before) << "no fight: the second drift writes nothing";
    // An operator's Bind takes it back.
    ASSERT_TRUE(s.bind("0000:01:00.0").ok());
    s.publish();
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "vfio-pci");
}

TEST_F(ServiceTest, HotplugBindsTheNewGroupOnly) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    FakeTree::Function gpu;
    gpu.address = "0000:05:00.0";
    gpu.vendor = "10de";
    gpu.device = "2331";
    gpu.class_code = "030200";
    gpu.driver = "nvidia";
    gpu.group = 20;
    tree.add_function(gpu);
    kernel.set_native_driver("0000:05:00.0", "nvidia");
    s.handle_events({addr("0000:05:00.0")});
    s.publish();
    EXPECT_EQ(state_of(s, 20), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:05:00.0"), "vfio-pci");

    tree.remove_function("0000:05:00.0");
    s.handle_events({addr("0000:05:00.0")});
    s.publish();
    EXPECT_EQ(s.inventory().groups.count(20), 0u);
    EXPECT_EQ(s.inventory().devices.count(addr("0000:05:00.0")), 0u);
}

TEST_F(ServiceTest, EarlyOverrideOnARefusedGroupIsClearedAndTheHostDriverProbed) {
    FakeTree::Function nic;
    nic.address = "0000:06:00.0";
    nic.vendor = "8086";
    nic.device = "10d3";
    nic.driver = "";
    nic.driver_override = "vfio-pci";  // set by the udev rule; vfio-pci was not loaded yet
    nic.group = 21;
    tree.add_function(nic);
    kernel.set_native_driver("0000:06:00.0", "e1000e");
    tree.write_file("etc/vfiod/vfiod.toml",
                    "[[device]]\nselector = \"8086:10d3\"\nearly = true\n"
                    "[[protect]]\naddress = \"0000:06:00.0\"\n");
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    EXPECT_EQ(state_of(s, 21), GroupState::Refused);
    EXPECT_EQ(s.inventory().groups.at(21).reason, Reason::Protected);
    EXPECT_EQ(kernel.read("sys/bus/pci/devices/0000:06:00.0/driver_override"), "(null)");
    EXPECT_EQ(driver_of(kernel, "0000:06:00.0"), "e1000e");
}

TEST_F(ServiceTest, BadReloadKeepsTheRunningConfig) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    Inventory before = s.inventory();
    tree.write_file("etc/vfiod/vfiod.toml", "[daemon]\nmode = \"sometimes\"\n");
    OpResult r = s.reload();
    s.publish();
    EXPECT_EQ(r.code, OpResult::Code::Failed);
    EXPECT_NE(r.message.find("vfiod.toml:2:"), std::string::npos) << r.message;
    EXPECT_EQ(s.inventory(), before);
    EXPECT_EQ(s.mode(), Mode::Enforce);
}

TEST_F(ServiceTest, ReloadThatChangesAReleasedGroupsEntriesClearsTheMark) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    ASSERT_TRUE(s.release("0000:01:00.0").ok());
    s.publish();
    // The same config again touches nothing: still released.
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(state_of(s, 13), GroupState::Released);
    // A new resource name for the GPU's entry is a change that touches the group.
    tree.write_file("etc/vfiod/vfiod.toml",
                    "[[device]]\nselector = \"10de:2331\"\nresource_name = \"nvidia.com/H100\"\n");
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(state_of(s, 13), GroupState::Bound);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "vfio-pci");
    EXPECT_EQ(s.inventory().devices.at(addr("0000:01:00.0")).resource_name, "nvidia.com/H100");
}

TEST_F(ServiceTest, OperatorErrorsUseTheClosedSetOfCodes) {
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    EXPECT_EQ(s.bind("../../etc").code, OpResult::Code::InvalidArgs);
    EXPECT_EQ(s.bind("0000:01:00.0\n").code, OpResult::Code::InvalidArgs);
    EXPECT_EQ(s.bind("0000:09:00.0").code, OpResult::Code::NotFound);
    EXPECT_EQ(s.bind("0000:00:1f.6").code, OpResult::Code::NotAllowlisted);
    OpResult r = s.bind("0000:02:00.0");
    EXPECT_EQ(r.code, OpResult::Code::Refused);
    EXPECT_EQ(r.message.rfind("in-use-storage:", 0), 0u) << r.message;
    EXPECT_EQ(s.release("0000:00:1f.6").code, OpResult::Code::NotAllowlisted);
}

// The kernel's answer to the O_EXCL probe of nvme1n1 (EBUSY while `claimed`), and for each
// probe the thread that made it and how many writes had been made by then.
class ClaimingKernel : public FakeKernel {
public:
    using FakeKernel::FakeKernel;
    int probe_exclusive(std::string_view rel) const override {
        std::lock_guard lock(m_);
        probes_.push_back({std::string(rel), std::this_thread::get_id(), writes().size()});
        return claimed && rel == "proc/1/root/dev/nvme1n1" ? EBUSY : 0;
    }
    struct Probe {
        std::string rel;
        std::thread::id thread;
        size_t writes_before;
    };
    std::vector<Probe> probes() const {
        std::lock_guard lock(m_);
        return probes_;
    }
    std::atomic<bool> claimed{true};

private:
    mutable std::mutex m_;
    mutable std::vector<Probe> probes_;
};

// Replies wait for the publication of what they did; one that throws while being sent costs the
// others theirs, and publish() itself never throws.
TEST_F(ServiceTest, RepliesGoOutAfterThePublicationEvenWhenOneThrows) {
    Service s(kernel, {});
    std::vector<std::string> seen;
    s.set_on_change([&](const Inventory&, const InventoryChange&) { seen.push_back("published"); });
    ASSERT_TRUE(s.start());
    seen.clear();
    s.release_async("0000:01:00.0", [&](const OpResult&) {
        seen.push_back("first");
        throw std::runtime_error("the caller's connection is gone");
    });
    s.release_async("0000:03:00.0",
                    [&](const OpResult& r) { seen.push_back(r.ok() ? "second" : r.message); });
    EXPECT_TRUE(seen.empty()) << "answered before publishing";
    EXPECT_NO_THROW(s.publish());
    EXPECT_EQ(seen, (std::vector<std::string>{"published", "first", "second"}));
    EXPECT_EQ(state_of(s, 13), GroupState::Released);
    EXPECT_EQ(state_of(s, 15), GroupState::Released);
}

// Runs the loop's side of the workers until `done`, for at most 10 s: each dispatch, then the
// publication (and the replies it holds) after it.
void run_until(Service& s, Workers& w, const std::function<bool()>& done) {
    s.publish();
    for (int i = 0; i < 1000 && !done(); ++i) {
        pollfd p{w.fd(), POLLIN, 0};
        if (::poll(&p, 1, 10) > 0) {
            w.dispatch();
            s.publish();
        }
    }
}

void run_until(Service& s, Workers& w, const bool& done) {
    run_until(s, w, [&] { return done; });
}

// Issue 11: the O_EXCL probe is itself a claim, so it runs only just before a bind writes, and
// off the loop: on the worker that writes, for the daemon's own decisions and for Bind alike.
TEST(ServiceClaims, AClaimedDiskIsProbedOnTheWorkerJustBeforeTheWritesAndRefused) {
    FakeTree tree;
    build_gpu_host(tree);
    const std::string disk = tree.devpath("0000:07:00.0") + "/nvme/nvme1/block/nvme1n1";
    tree.add_function(FakeTree::pci("0000:07:00.0", "1b36", "0010", "010802", "nvme", 22));
    tree.add_block("0000:07:00.0", "nvme/nvme1", "nvme1n1", 259, 10);
    tree.write_file(disk + "/uevent", "MAJOR=259\nMINOR=10\nDEVNAME=nvme1n1\nDEVTYPE=disk\n");
    tree.write_file("run/udev/data/b259:10", "E:ID_FS_TYPE=zfs_member\n");
    tree.write_file("etc/vfiod/vfiod.toml", "[[device]]\nselector = \"1b36:0010\"\n");
    ClaimingKernel kernel(tree);

    // Coldplug: decided, probed, refused; nothing written.
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    ASSERT_EQ(state_of(s, 22), GroupState::Refused);
    const auto& g = s.inventory().groups.at(22);
    EXPECT_EQ(g.reason, Reason::InUseStorage);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{addr("0000:07:00.0")});
    EXPECT_EQ(kernel.writes().size(), 0u);
    ASSERT_FALSE(kernel.probes().empty());
    EXPECT_EQ(kernel.probes().back().rel, "proc/1/root/dev/nvme1n1");

    // Bind with workers: the probe runs on the worker, the loop only hears the refusal.
    Workers w;
    s.set_workers(&w);
    size_t probed = kernel.probes().size();
    bool done = false;
    OpResult r;
    s.bind_async("0000:07:00.0", [&](const OpResult& res) { r = res, done = true; });
    run_until(s, w, done);
    ASSERT_TRUE(done);
    EXPECT_EQ(r.code, OpResult::Code::Refused);
    EXPECT_EQ(r.message.rfind("in-use-storage: group 22, blocked by 0000:07:00.0: 0000:07:00.0: "
                              "nvme1n1 is claimed by the kernel (udev sees zfs_member on it)", 0),
              0u) << r.message;
    EXPECT_EQ(kernel.writes().size(), 0u);
    EXPECT_EQ(state_of(s, 22), GroupState::Refused);
    auto probes = kernel.probes();
    ASSERT_EQ(probes.size(), probed + 1);
    EXPECT_NE(probes.back().thread, std::this_thread::get_id());

    // The claim ends: the next Bind probes once more, right before its first write, and binds.
    kernel.claimed = false;
    done = false;
    s.bind_async("0000:07:00.0", [&](const OpResult& res) { r = res, done = true; });
    run_until(s, w, done);
    ASSERT_TRUE(done);
    EXPECT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(driver_of(kernel, "0000:07:00.0"), "vfio-pci");
    probes = kernel.probes();
    ASSERT_EQ(probes.size(), probed + 2);
    EXPECT_NE(probes.back().thread, std::this_thread::get_id());
    EXPECT_EQ(probes.back().writes_before, 0u);
    EXPECT_GT(kernel.writes().size(), 0u);
    EXPECT_EQ(state_of(s, 22), GroupState::Bound);
}

// Issue 20: a Reload waits for the operations in flight, those an earlier Reload started too;
// the Reloads waiting when they end share one reload, and one arriving while that reload's
// operations run waits again. Here every decision of the GPU's group writes: vfio-pci's probe
// of the GPU fails, so each bind is rolled back and the group stays failed.
TEST_F(ServiceTest, WaitingReloadsShareOneReloadAndWaitForItsOperations) {
    const std::string gpu_override = "sys/bus/pci/devices/0000:01:00.0/driver_override";
    kernel.fail_probe("0000:01:00.0", "vfio-pci");
    Service s(kernel, {});
    Workers w;  // after the service: it goes first, waiting for the jobs that use the service
    s.set_workers(&w);
    ASSERT_TRUE(s.start());
    bool idle = false;
    s.when_idle([&] { idle = true; });
    run_until(s, w, idle);
    ASSERT_TRUE(idle);
    ASSERT_EQ(state_of(s, 13), GroupState::Failed);
    auto binds_tried = [&] {
        auto records = kernel.writes();
        return std::count_if(records.begin(), records.end(), [&](const FakeKernel::Record& r) {
            return r.path == gpu_override && r.value == "vfio-pci";
        });
    };
    const auto before = binds_tried();

    std::vector<OpResult> answers;
    auto reload = [&] { s.reload_async([&](const OpResult& r) { answers.push_back(r); }); };
    kernel.block_path(gpu_override);
    reload();  // nothing in flight: it reloads at once, and its bind of the GPU hangs
    s.publish();
    ASSERT_EQ(answers.size(), 1u);
    ASSERT_TRUE(eventually([&] { return kernel.blocked_now() == 1; }, std::chrono::seconds(5)));
    for (int i = 0; i < 3; ++i)
        reload();
    s.publish();
    EXPECT_EQ(answers.size(), 1u) << "a Reload did not wait for the bind another one started";

    kernel.unblock();
    run_until(s, w, [&] { return answers.size() == 4; });
    ASSERT_EQ(answers.size(), 4u);
    EXPECT_TRUE(s.busy(13)) << "the shared reload decided no bind";
    reload();  // while the shared reload's bind runs
    s.publish();
    EXPECT_EQ(answers.size(), 4u) << "a Reload did not wait for the last reload's bind";
    run_until(s, w, [&] { return answers.size() == 5; });
    ASSERT_EQ(answers.size(), 5u);
    for (const auto& r : answers)
        EXPECT_TRUE(r.ok()) << r.message;

    idle = false;
    s.when_idle([&] { idle = true; });
    run_until(s, w, idle);
    ASSERT_TRUE(idle);
    // One bind per reload that ran: the first, the one the three shared, the last.
    EXPECT_EQ(binds_tried(), before + 3);
    EXPECT_EQ(state_of(s, 13), GroupState::Failed);
    EXPECT_EQ(driver_of(kernel, "0000:01:00.0"), "nvidia");
}

// The reload that serves the waiting Reloads settles groups without writes, and each of them
// reaches the service's idle check from within it: idle is said only once the requests held
// for the reload have run too (the daemon's READY=1 rides on it).
TEST_F(ServiceTest, IdleWaitsForTheRequestsHeldForAReload) {
    const char* gpu = "0000:01:00.0";
    const char* nic = "0000:03:00.0";
    Service s(kernel, {});
    Workers w;
    s.set_workers(&w);
    ASSERT_TRUE(s.start());
    bool idle = false;
    s.when_idle([&] { idle = true; });
    run_until(s, w, idle);
    int released = 0;
    for (const char* a : {gpu, nic})
        s.release_async(a, [&](const OpResult& r) { released += r.ok(); });
    run_until(s, w, [&] { return released == 2; });
    ASSERT_EQ(released, 2);

    kernel.block_path(std::string("sys/bus/pci/devices/") + nic + "/driver_override");
    std::optional<OpResult> nic_bound, reloaded, gpu_bound;
    s.bind_async(nic, [&](const OpResult& r) { nic_bound = r; });
    s.reload_async([&](const OpResult& r) { reloaded = r; });  // waits for the NIC's bind
    s.bind_async(gpu, [&](const OpResult& r) { gpu_bound = r; });  // held for the reload
    idle = false;
    std::string gpu_driver_when_idle;  // the reply itself is sent at the next publish()
    s.when_idle([&] {
        idle = true;
        gpu_driver_when_idle = driver_of(kernel, gpu);
    });
    s.publish();
    EXPECT_FALSE(reloaded);
    EXPECT_FALSE(gpu_bound);
    kernel.unblock();
    run_until(s, w, idle);
    ASSERT_TRUE(idle);
    EXPECT_EQ(gpu_driver_when_idle, "vfio-pci") << "idle while a request held for the reload waited";
    ASSERT_TRUE(nic_bound && reloaded && gpu_bound);
    EXPECT_TRUE(nic_bound->ok()) << nic_bound->message;
    EXPECT_TRUE(reloaded->ok()) << reloaded->message;
    EXPECT_TRUE(gpu_bound->ok()) << gpu_bound->message;
    EXPECT_EQ(driver_of(kernel, gpu), "vfio-pci");
}

}  // namespace
}  // namespace vfiod::test
