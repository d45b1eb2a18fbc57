// Incremental re-reads (issue 14 part 2) are only an optimisation if they change nothing: a
// property test drives a fake host through a random sequence of what the kernel does (functions
// added and removed, drivers bound, unbound and changed, a function coming back in another IOMMU
// group, VFs created and destroyed on a PF, a mounted disk arriving with its controller), tells
// the reader and the service only the functions udev would name, and after every step compares
// what they hold with a fresh full read of the same tree. The host-wide tables (mounts, swaps,
// routes, the netdev list) are kept between steps while a watch that acts like the kernel's
// (POLLPRI on mountinfo and swaps, rtnetlink) says they did not change; facts that change without
// a PCI event (a disk mounted, a route added, a VM opening a group) are seen by the next decision
// on the group they concern.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fake_tree.hpp"
#include "io/host_tables.hpp"
#include "io/host_use.hpp"
#include "io/topology_reader.hpp"
#include "io/config_loader.hpp"
#include "service/host_model.hpp"
#include "service/service.hpp"

namespace vfiod::test {
namespace {

constexpr unsigned kSteps = 500;

const char kConfig[] = R"([daemon]
mode = "observe"
companions = "bind"

[[device]]
selector = "8086:10d3"
resource_name = "intel.com/nic"

[[device]]
selector = "10de:2331"
resource_name = "nvidia.com/gpu"

[[device]]
selector = "144d:a808"
resource_name = "samsung.com/nvme"

[[device]]
selector = "8086:154c"
resource_name = "intel.com/vf"

[[protect]]
address = "0000:05:00.1"

# The PFs' plans are made incrementally too (HostModel::replan_pfs): each step's VF count,
# whatever it is, is judged as a fresh start judges it.
[[sriov]]
selector = "8086:1572"
num_vfs = 3
)";

struct Kind {
    const char* vendor;
    const char* device;
    const char* class_code;
    const char* driver;  // its host driver
};

const Kind kKinds[] = {
    {"8086", "10d3", "020000", "e1000e"},         // allowlisted NIC
    {"10de", "2331", "030200", "nvidia"},         // allowlisted GPU
    {"10de", "22a3", "040300", "snd_hda_intel"},  // its audio: a companion
    {"144d", "a808", "010802", "nvme"},           // allowlisted NVMe, sometimes mounted
    {"1af4", "1042", "010000", "virtio-pci"},     // not allowlisted
    {"8086", "1572", "020000", "i40e"},           // an SR-IOV PF (not allowlisted)
};
constexpr size_t kPfKind = 5;

// The host the steps act on, and what it takes to act like the kernel on it.
class Model {
public:
    explicit Model(unsigned seed) : rng_(seed) {
        tree_.enable_iommu();
        tree_.add_driver("vfio-pci");
        tree_.write_file("etc/vfiod/vfiod.toml", kConfig);
        tree_.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
        tree_.write_file("proc/net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n");
        write_mounts();
        for (int i = 0; i < 12; ++i)
            add(free_address());
    }

    const FakeTree& tree() const { return tree_; }

    // One random kernel change; returns the functions its uevents name.
    std::set<PciAddress> step(std::string* what) {
        std::set<std::string> touched;
        unsigned kind = pick(8);
        if (kind >= 2 && kind <= 5)
            vm_exits(live_address_peek_ = live_address());
        switch (kind) {
        case 0:
        case 1:
            if (auto a = free_address(); !a.empty()) {
                add(a);
                touched.insert(a);
                *what = "add " + a;
            }
            break;
        case 2:
            if (auto a = live_address_peek_; !a.empty()) {
                remove(a, &touched);
                *what = "remove " + a;
            }
            break;
        case 3:
            if (auto a = live_address_peek_; !a.empty()) {
                const char* drivers[] = {"vfio-pci", kKinds[fns_[a].kind].driver, "pci-stub"};
                std::string d = drivers[pick(3)];
                tree_.bind(a, d);
                touched.insert(a);
                *what = "bind " + a + " to " + d;
            }
            break;
        case 4:
            if (auto a = live_address_peek_; !a.empty()) {
                tree_.unbind(a);
                touched.insert(a);
                *what = "unbind " + a;
            }
            break;
        case 5:
            // Hot-removed and back in another group (an ACS change, a replaced card): one burst.
            if (auto a = live_address_peek_; !a.empty() && !fns_[a].pf_of_vfs()) {
                Fn f = fns_[a];
                remove(a, &touched);
                f.group = 20 + pick(8);
                add(a, f);
                *what = "regroup " + a + " into " + std::to_string(f.group);
            }
            break;
        case 6:
        case 7:
            toggle_vfs(&touched, what);
            break;
        }
        std::set<PciAddress> out;
        for (const auto& a : touched)
            out.insert(*PciAddress::parse(a));
        return out;
    }

    // vfio-pci cannot let go of a function while a VM holds its group (the unbind waits for the
    // VM), so the model's VM leaves before a function of its group changes.
    void vm_exits(const std::string& a) {
        if (!fns_.count(a))
            return;
        const std::string pid = "proc/" + std::to_string(1000 + fns_[a].group);
        if (std::filesystem::exists(tree_.root() + "/" + pid))
            tree_.remove(pid);
    }

private:
    struct Fn {
        size_t kind = 0;
        unsigned group = 0;
        std::string driver;
        int disk = -1;  // minor of its disk (259:N); -1 for none
        bool mounted = true;
        std::string netdev;  // its interface, for a NIC on its host driver
        std::vector<std::string> vfs;
        bool vf = false;
        bool pf_of_vfs() const { return !vfs.empty(); }
    };

    unsigned pick(unsigned n) { return std::uniform_int_distribution<unsigned>(0, n - 1)(rng_); }

    // Endpoints live on buses 1-6, functions 0-3: few enough that groups fill up and collide.
    std::string free_address() {
        for (int tries = 0; tries < 20; ++tries) {
            char buf[16];
            std::snprintf(buf, sizeof buf, "0000:%02x:00.%x", 1 + pick(6), pick(4));
            if (!fns_.count(buf))
                return buf;
        }
        return "";
    }

    std::string live_address() {
        std::vector<std::string> live;
        for (const auto& [a, f] : fns_)
            if (!f.vf)
                live.push_back(a);
        return live.empty() ? "" : live[pick(live.size())];
    }

    void add(const std::string& a) {
        Fn f;
        f.kind = pick(std::size(kKinds));
        f.group = 20 + pick(8);
        const char* drivers[] = {kKinds[f.kind].driver, "", "vfio-pci"};
        f.driver = drivers[pick(3)];
        if (f.kind == 3 && pick(2) == 0)
            f.disk = next_disk_++;
        add(a, f);
    }

    void add(const std::string& a, Fn f) {
        const Kind& k = kKinds[f.kind];
        auto fn = FakeTree::pci(a, k.vendor, k.device, k.class_code, f.driver, f.group);
        if (f.kind == kPfKind)
            fn.sriov_totalvfs = 4;
        tree_.add_function(fn);
        if (f.disk >= 0) {
            tree_.add_block(a, "nvme/nvme" + std::to_string(f.disk),
                            "nvme" + std::to_string(f.disk) + "n1", 259, f.disk);
        }
        f.netdev.clear();
        if ((f.kind == 0 || f.kind == kPfKind) && f.driver == k.driver) {
            f.netdev = "eth" + std::to_string(next_netdev_++);
            tree_.add_netdev(a, f.netdev);
        }
        f.vfs.clear();
        fns_[a] = f;
        write_mounts();
    }

    void remove(const std::string& a, std::set<std::string>* touched) {
        // A PF goes with its VFs (the kernel removes them first).
        for (const auto& vf : fns_[a].vfs) {
            tree_.remove_function(vf);
            fns_.erase(vf);
            touched->insert(vf);
        }
        tree_.remove_function(a);
        fns_.erase(a);
        touched->insert(a);
        write_mounts();
    }

    // `echo N > sriov_numvfs` on a PF: its VFs appear (each in its own group) or go; udev names
    // the VFs, not the PF, whose sriov_numvfs changed all the same.
    void toggle_vfs(std::set<std::string>* touched, std::string* what) {
        for (auto& [a, f] : fns_) {
            if (f.kind != kPfKind || (pick(2) && f.vfs.empty()))
                continue;
            const std::string pf = a;
            if (!f.vfs.empty()) {
                for (const auto& vf : f.vfs) {
                    tree_.remove_function(vf);
                    touched->insert(vf);
                }
                for (const auto& vf : f.vfs)
                    fns_.erase(vf);
                fns_[pf].vfs.clear();
                tree_.write_file(tree_.devpath(pf) + "/sriov_numvfs", "0\n");
                *what = "disable the VFs of " + pf;
                return;
            }
            unsigned n = 1 + pick(4);
            std::vector<std::string> vfs;
            for (unsigned k = 0; k < n; ++k) {
                // Device 1 + the PF's function: two PFs on one bus never share a VF address.
                std::string buf = pf.substr(0, 8) + "0" + std::string(1, char(pf.back() + 1)) +
                                  "." + std::to_string(k);
                auto fn = FakeTree::pci(buf, "8086", "154c", "020000", pick(2) ? "iavf" : "",
                                        next_vf_group_++);
                fn.physfn = pf;
                tree_.add_function(fn);
                Fn v;
                v.vf = true;
                fns_[buf] = v;
                vfs.push_back(buf);
                touched->insert(buf);
            }
            fns_[pf].vfs = vfs;
            tree_.write_file(tree_.devpath(pf) + "/sriov_numvfs", std::to_string(n) + "\n");
            *what = "enable " + std::to_string(n) + " VFs on " + pf;
            return;
        }
    }

    // The mount table follows the disks: a mounted disk's controller counts as in use.
    void write_mounts() {
        std::string mounts;
        for (const auto& [a, f] : fns_)
            if (f.disk >= 0 && f.mounted)
                mounts += "1 1 259:" + std::to_string(f.disk) + " / /srv/d" +
                          std::to_string(f.disk) + " rw - ext4 /dev/nvme" +
                          std::to_string(f.disk) + "n1 rw\n";
        tree_.write_file("proc/self/mountinfo", mounts);
    }

public:
    // One change the kernel makes without a PCI uevent: a disk mounted or unmounted, a route
    // added or gone, a VM opening or closing a group's vfio node.
    void silent_step(std::string* what) {
        std::vector<std::string> disks, nics, vfio;
        for (const auto& [a, f] : fns_) {
            if (f.disk >= 0)
                disks.push_back(a);
            if (!f.netdev.empty())
                nics.push_back(a);
            // A VM opens the group's node, which exists while the group is on vfio-pci.
            if (f.driver == "vfio-pci" &&
                std::filesystem::exists(tree_.root() + "/dev/vfio/" + std::to_string(f.group)))
                vfio.push_back(a);
        }
        switch (pick(3)) {
        case 0:
            if (!disks.empty()) {
                Fn& f = fns_[disks[pick(disks.size())]];
                f.mounted = !f.mounted;
                write_mounts();
                *what = (f.mounted ? "mount nvme" : "unmount nvme") + std::to_string(f.disk) + "n1";
            }
            break;
        case 1:
            if (!nics.empty()) {
                const std::string& dev = fns_[nics[pick(nics.size())]].netdev;
                if (!routed_.erase(dev))
                    routed_.insert(dev);
                std::string table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n";
                for (const auto& r : routed_)
                    table += r + "\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\n";
                tree_.write_file("proc/net/route", table);
                *what = "route via " + dev + (routed_.count(dev) ? " added" : " gone");
            }
            break;
        case 2:
            if (!vfio.empty()) {
                const std::string a = vfio[pick(vfio.size())];
                const std::string pid = "proc/" + std::to_string(1000 + fns_[a].group);
                if (std::filesystem::exists(tree_.root() + "/" + pid)) {
                    tree_.remove(pid);
                    *what = "the VM on group " + std::to_string(fns_[a].group) + " exits";
                } else {
                    tree_.hold_open(1000 + fns_[a].group, "qemu", 20,
                                    "/dev/vfio/" + std::to_string(fns_[a].group));
                    *what = "a VM opens group " + std::to_string(fns_[a].group);
                }
            }
            break;
        }
    }

    // A function some decision (a Bind, an event for its group) is about to read afresh.
    std::optional<PciAddress> any_function() {
        if (fns_.empty())
            return std::nullopt;
        auto it = fns_.begin();
        std::advance(it, pick(fns_.size()));
        return PciAddress::parse(it->first);
    }

private:
    std::mt19937 rng_;
    FakeTree tree_;
    std::map<std::string, Fn> fns_;
    std::set<std::string> routed_;
    std::string live_address_peek_;
    int next_disk_ = 0;
    int next_netdev_ = 0;
    unsigned next_vf_group_ = 100;
};

// What the kernel tells a watcher of the tree's tables: that they changed since it last asked
// (mountinfo and swaps raise POLLPRI, rtnetlink sends a message per link, address or route).
class TreeWatch : public TableWatch {
public:
    explicit TreeWatch(std::string root) : root_(std::move(root)) {}
    bool mounts_changed() override {
        return differs(&mounts_, file("proc/1/mountinfo") + file("proc/self/mountinfo") +
                                     file("proc/1/mounts") + file("proc/mounts") +
                                     file("proc/swaps"));
    }
    bool network_changed() override {
        std::string links;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(root_ + "/sys/class/net", ec))
            links += e.path().filename().string() + " " +
                     std::filesystem::read_symlink(e.path(), ec).string() + "\n";
        return differs(&network_, file("proc/net/route") + file("proc/net/ipv6_route") + links);
    }

private:
    std::string file(const std::string& rel) const {
        std::ifstream in(root_ + "/" + rel);
        return std::string(std::istreambuf_iterator<char>(in), {}) + "\0";
    }
    static bool differs(std::string* seen, std::string now) {
        bool changed = now != *seen;
        *seen = std::move(now);
        return changed;
    }
    std::string root_, mounts_, network_;
};

// The findings about `only`, and nothing else.
HostUse about(const HostUse& use, const std::set<PciAddress>& only) {
    HostUse out;
    auto copy = [&](const auto& from, auto& to) {
        for (const auto& [a, lines] : from)
            if (only.count(a))
                to[a] = lines;
    };
    copy(use.storage, out.storage);
    copy(use.network, out.network);
    copy(use.device, out.device);
    copy(use.vfio, out.vfio);
    return out;
}

std::string shown(const HostUse& use) {
    std::string out;
    for (const auto* m : {&use.storage, &use.network, &use.device, &use.vfio})
        for (const auto& [a, lines] : *m)
            for (const auto& l : lines)
                out += a.str() + ": " + l + "\n";
    return out;
}

// What the service's refresh does for an event naming `touched`: re-reads those functions and
// their groups' members, and the findings about them. Returns the functions re-read.
std::set<PciAddress> refresh(const HostFs& fs, Topology* topo, HostUse* use, HostTables* tables,
                             const std::set<PciAddress>& touched, unsigned* changed_groups = nullptr) {
    std::set<unsigned> groups = refresh_topology(fs, topo, touched, nullptr);
    if (changed_groups)
        *changed_groups += groups.size();
    std::set<PciAddress> only(touched);
    for (unsigned g : groups)
        if (auto it = topo->groups.find(g); it != topo->groups.end())
            only.insert(it->second.begin(), it->second.end());
    merge_host_use(use, read_host_use(fs, *topo, nullptr, only, tables), only);
    return only;
}

class IncrementalTest : public ::testing::Test {
protected:
    void SetUp() override { spdlog::set_level(spdlog::level::warn); }
    void TearDown() override { spdlog::set_level(spdlog::level::info); }
};

TEST_F(IncrementalTest, ReaderKeptUpToDateEqualsAFullReadAfterEveryStep) {
    Model m(20261201);
    KernelHostFs fs(m.tree().root());
    Topology topo = read_topology(fs, nullptr);
    HostUse use = read_host_use(fs, topo, nullptr);
    HostTables tables(std::make_unique<TreeWatch>(m.tree().root()));
    unsigned changed_groups = 0, in_use = 0;
    for (unsigned i = 0; i < kSteps; ++i) {
        std::string what = "nothing";
        auto touched = m.step(&what);
        auto only = refresh(fs, &topo, &use, &tables, touched, &changed_groups);

        Topology full = read_topology(fs, nullptr);
        ASSERT_EQ(topo, full) << "step " << i << ": " << what;
        ASSERT_EQ(use, read_host_use(fs, full, nullptr)) << "step " << i << ": " << what;
        in_use += !use.storage.empty();
    }
    // The sequence exercised what it claims to: groups came and went, disks were in use.
    EXPECT_GT(changed_groups, kSteps);
    EXPECT_GT(in_use, kSteps / 10);
    // The tables were read again when they changed, not on every step.
    EXPECT_LT(tables.mount_reads(), kSteps / 2);
    EXPECT_GT(tables.mount_reads(), 10u);
    EXPECT_LT(tables.network_reads(), kSteps / 2);
}

// Between events the host changes under the daemon with no uevent at all. Whatever a decision
// then reads afresh (the group of a function, as an event for it or a Bind re-reads it) must be
// what a full read says about it, cached tables or not.
TEST_F(IncrementalTest, FactsChangedBetweenEventsAreSeenByTheNextDecision) {
    Model m(7);
    KernelHostFs fs(m.tree().root());
    Topology topo = read_topology(fs, nullptr);
    HostUse use = read_host_use(fs, topo, nullptr);
    HostTables tables(std::make_unique<TreeWatch>(m.tree().root()));
    std::map<std::string, unsigned> seen;  // silent changes a decision then had to see
    for (unsigned i = 0; i < kSteps; ++i) {
        std::string what = "nothing";
        std::set<PciAddress> touched;
        if (i % 2)
            touched = m.step(&what);
        else
            m.silent_step(&what);
        if (auto a = m.any_function())
            touched.insert(*a);
        HostUse before = use;
        auto only = refresh(fs, &topo, &use, &tables, touched);
        before = about(before, only);

        HostUse fresh = about(read_host_use(fs, read_topology(fs, nullptr), nullptr), only);
        ASSERT_EQ(shown(about(use, only)), shown(fresh)) << "step " << i << ": " << what;
        if (!(before == fresh))
            ++seen[what.substr(0, what.find(' '))];
    }
    // Each kind of silent change was among what decisions had to catch up with.
    for (const char* kind : {"mount", "unmount", "route", "a", "the"})
        EXPECT_GT(seen[kind], 0u) << kind;
    EXPECT_LT(tables.mount_reads(), kSteps * 3 / 4);
}

TEST_F(IncrementalTest, ServiceFedOnlyEventsPublishesWhatAFreshStartWould) {
    Model m(4242);
    KernelHostFs fs(m.tree().root());
    Service s(fs, {});
    s.set_table_watch(std::make_unique<TreeWatch>(m.tree().root()));
    ASSERT_TRUE(s.start());
    std::set<GroupState> seen;
    std::set<PfState> pf_seen;
    for (unsigned i = 0; i < kSteps; ++i) {
        std::string what = "nothing";
        s.handle_events(m.step(&what));
        s.publish();
        Service fresh(fs, {});
        ASSERT_TRUE(fresh.start());
        ASSERT_EQ(s.inventory(), fresh.inventory()) << "step " << i << ": " << what;
        ASSERT_EQ(s.plan_json(), fresh.plan_json()) << "step " << i << ": " << what;
        for (const auto& [g, info] : s.inventory().groups)
            seen.insert(info.state);
        for (const auto& [a, info] : s.inventory().pfs)
            pf_seen.insert(info.state);
    }
    // Groups were both pending (would bind) and refused along the way; PFs both had the count
    // their entry wants and did not.
    EXPECT_TRUE(seen.count(GroupState::Pending));
    EXPECT_TRUE(seen.count(GroupState::Refused));
    EXPECT_TRUE(pf_seen.count(PfState::Pending));
    EXPECT_TRUE(pf_seen.count(PfState::Ready));
    EXPECT_LT(s.tables().mount_reads(), kSteps / 2);
}

}  // namespace
}  // namespace vfiod::test

namespace vfiod::test {
namespace {

// A broken host: events for functions that never existed, a function whose attributes stop
// making sense, junk in a group's member list. The incremental reader says what a full read says
// (the odd function is left out, its group still lists it) and warns like it.
TEST(IncrementalHostileTest, OddEventsAndOddFilesReadLikeAFullRead) {
    FakeTree t;
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:01:00.0", "8086", "10d3", "020000", "e1000e", 5));
    t.add_function(FakeTree::pci("0000:01:00.1", "8086", "10d3", "020000", "e1000e", 5));
    KernelHostFs fs(t.root());
    Topology topo = read_topology(fs, nullptr);

    t.write_file(t.devpath("0000:01:00.1") + "/vendor", "zz\n");
    t.write_file("sys/kernel/iommu_groups/5/devices/not-an-address", "");
    std::vector<std::string> warnings;
    auto groups = refresh_topology(
        fs, &topo, {*PciAddress::parse("0000:01:00.1"), *PciAddress::parse("0000:09:1f.7")},
        &warnings);
    EXPECT_EQ(groups, std::set<unsigned>{5});
    EXPECT_EQ(topo, read_topology(fs, nullptr));
    EXPECT_FALSE(topo.find(*PciAddress::parse("0000:01:00.1")));
    EXPECT_EQ(topo.groups.at(5).size(), 2u);
    std::string all;
    for (const auto& w : warnings)
        all += w + "\n";
    EXPECT_NE(all.find("0000:01:00.1"), std::string::npos) << all;
    EXPECT_NE(all.find("not-an-address"), std::string::npos) << all;

    // The whole group goes: the group itself is gone too.
    t.remove_function("0000:01:00.0");
    t.remove_function("0000:01:00.1");
    t.remove("sys/kernel/iommu_groups/5");
    refresh_topology(fs, &topo, {*PciAddress::parse("0000:01:00.0")}, nullptr);
    EXPECT_EQ(topo, read_topology(fs, nullptr));
    EXPECT_TRUE(topo.groups.empty());
    EXPECT_TRUE(topo.functions.empty());
}

// A function whose iommu_group link names a group whose member list lacks it (a broken or racing
// host). A full read plans that group with it; so must a refresh, which keeps such strays apart
// from the listed members (HostModel::strays_), since on a sane host there are none.
TEST(IncrementalHostileTest, AFunctionItsGroupDoesNotListIsPlannedAsAFullReadPlansIt) {
    FakeTree t;
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:01:00.0", "1af4", "1042", "010000", "virtio-pci", 7));
    t.add_function(FakeTree::pci("0000:01:00.1", "8086", "10d3", "020000", "e1000e", 7));
    t.remove("sys/kernel/iommu_groups/7/devices/0000:01:00.1");
    KernelHostFs fs(t.root());
    ConfigResult cr = parse_config("[[device]]\nselector = \"8086:10d3\"\n", "t.toml");
    ASSERT_TRUE(cr.config);
    HostModel m(fs);
    m.replace_config(*cr.config);
    m.reread();
    auto planned = [&](const HostModel& h) {
        const GroupPlan* gp = h.group_plan(7);
        return gp ? std::string(to_string(gp->action)) + " " + to_string(gp->reason) + " " +
                        std::to_string(gp->devices.size())
                  : std::string("none");
    };
    const std::string full = planned(m);
    EXPECT_NE(full, "none");
    // Its driver goes: an event names it, and only it.
    t.unbind("0000:01:00.1");
    m.refresh({*PciAddress::parse("0000:01:00.1")});
    HostModel fresh(fs);
    fresh.replace_config(*cr.config);
    fresh.reread();
    EXPECT_EQ(planned(m), planned(fresh));
    EXPECT_NE(planned(m), "none");
    // The listed member's event re-plans the group too: the stray is still in it.
    m.refresh({*PciAddress::parse("0000:01:00.0")});
    EXPECT_EQ(planned(m), planned(fresh));
}

}  // namespace
}  // namespace vfiod::test
