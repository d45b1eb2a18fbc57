// The daemon's mdev side (DESIGN §12) through the service, on the fake kernel: each (parent, type)
// pair an [[mdev]] entry reaches is made at start and on Reload, in config order (a later pair
// the parent's budget cannot hold is refused, the earlier kept), and a parent that registers
// while vfiod runs gets its mdevs from its MDEV_STATE=registered event, with no Reload. No
// workers: each operation runs to its end on the caller's thread.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config_test_helpers.hpp"
#include "exec/journal.hpp"
#include "io/mdev_reader.hpp"
#include "mdev_test_host.hpp"
#include "service/service.hpp"

namespace vfiod::test {
namespace {

std::string entry(const char* parent, const char* type, unsigned count) {
    return "[[mdev]]\nparent = \"" + std::string(parent) + "\"\ntype = \"" + type +
           "\"\ncount = " + std::to_string(count) + "\n";
}
const std::string kEnforce = "[daemon]\nmode = \"enforce\"\n";

struct MdevService : ::testing::Test, FakeMdevHost {
    MdevService() { listen(); }
    // What a udev monitor hears of a parent's registration: its name, the devpath's last part.
    void listen() {
        kernel->on_device_uevent([this](const Uevent& ev) {
            if (ev.action == "change" && ev.get("MDEV_STATE") == "registered") {
                std::lock_guard lock(mu);
                registered.insert(ev.devpath.substr(ev.devpath.rfind('/') + 1));
            }
        });
    }
    void write_config(const std::string& toml) { tree.write_file("etc/vfiod/vfiod.toml", toml); }
    std::set<std::string> uuids() {
        std::set<std::string> out;
        for (const auto& [u, md] : read_mdev_host(*kernel, nullptr).mdevs)
            out.insert(u);
        return out;
    }
    // The registrations heard so far, handed to the service as the event loop does.
    void pump(Service& s) {
        std::set<std::string> parents;
        {
            std::lock_guard lock(mu);
            parents.swap(registered);
        }
        if (!parents.empty())
            s.handle_mdev_events(parents);
        s.publish();
    }
    std::mutex mu;
    std::set<std::string> registered;
};

TEST_F(MdevService, StartMakesEachPairInConfigOrderAndRefusesWhatTheBudgetCannotHold) {
    kernel->register_mdev_parent(mbochs_parent());
    // mbochs has 256 MB: two small ones take 8, leaving 3 of the 4 large ones wanted.
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2) +
                 entry("mbochs", "mbochs-large", 4));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    s.publish();
    EXPECT_EQ(uuids(), (std::set<std::string>{mdev_uuid("mbochs", "mbochs-small", 0),
                                              mdev_uuid("mbochs", "mbochs-small", 1)}));
    // A Reload asking for 3 large ones: they fit now, beside the small ones kept.
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2) +
                 entry("mbochs", "mbochs-large", 3));
    EXPECT_TRUE(s.reload().ok());
    EXPECT_EQ(uuids().size(), 2u + 3u);
    EXPECT_TRUE(uuids().count(mdev_uuid("mbochs", "mbochs-large", 2)));
}

TEST_F(MdevService, ObserveModeMakesNothing) {
    kernel->register_mdev_parent(mbochs_parent());
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2));
    Service s(*kernel, ServiceOptions{std::nullopt, true});  // --observe
    ASSERT_TRUE(s.start());
    EXPECT_TRUE(uuids().empty());
}

TEST_F(MdevService, AParentRegisteringWhileRunningGetsItsMdevsFromItsEvent) {
    kernel->register_mdev_parent(mbochs_parent());
    write_config(kEnforce + entry("mtty", "mtty-2", 1));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_TRUE(uuids().empty());  // mtty is not loaded: no-parent, nothing made
    kernel->register_mdev_parent(mtty_parent());
    pump(s);
    EXPECT_EQ(uuids(), std::set<std::string>{mdev_uuid("mtty", "mtty-2", 0)});
}

TEST_F(MdevService, ReloadRemovesOnlyVfiodsOwnAboveCountAndLeavesAForeignOne) {
    kernel->register_mdev_parent(mbochs_parent());
    const std::string foreign = "0a1b2c3d-0000-4000-8000-000000000001";
    ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", "mbochs-small"), foreign), 0);
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    EXPECT_EQ(uuids().size(), 3u);
    write_config(kEnforce + entry("mbochs", "mbochs-small", 1));
    EXPECT_TRUE(s.reload().ok());
    EXPECT_EQ(uuids(), (std::set<std::string>{foreign, mdev_uuid("mbochs", "mbochs-small", 0)}));
    // A restart after the mdevs were removed by hand makes them again, with the same UUIDs.
    ASSERT_EQ(kernel->write(mdev_paths::remove_file(mdev_uuid("mbochs", "mbochs-small", 0)), "1"),
              0);
    Service again(*kernel, {});
    ASSERT_TRUE(again.start());
    EXPECT_EQ(uuids(), (std::set<std::string>{foreign, mdev_uuid("mbochs", "mbochs-small", 0)}));
}

// What the service publishes of its mdevs (DESIGN §12): one record per wanted mdev, present or
// not, and per foreign one, each with its state, group and why.
struct MdevPublished : MdevService {
    const MdevInfo* find(Service& s, const std::string& uuid) {
        s.publish();
        auto it = s.inventory().mdevs.find(uuid);
        return it == s.inventory().mdevs.end() ? nullptr : &it->second;
    }
    MdevState state(Service& s, const std::string& uuid) {
        const MdevInfo* m = find(s, uuid);
        return m ? m->state : MdevState::Pending;
    }
    const std::string small0 = mdev_uuid("mbochs", "mbochs-small", 0);
    const std::string small1 = mdev_uuid("mbochs", "mbochs-small", 1);
    const std::string mtty0 = mdev_uuid("mtty", "mtty-2", 0);
    const std::string foreign = "0a1b2c3d-0000-4000-8000-000000000001";
};

TEST_F(MdevPublished, EachWantedAndForeignMdevIsPublishedWithItsStateAndGroup) {
    kernel->register_mdev_parent(mbochs_parent());
    ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", "mbochs-small"), foreign), 0);
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2) + entry("mtty", "mtty-2", 1));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    s.publish();
    ASSERT_EQ(s.inventory().mdevs.size(), 4u);
    const MdevInfo* m = find(s, small1);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->state, MdevState::Ready);
    EXPECT_EQ(m->parent, "mbochs");
    EXPECT_EQ(m->type, "mbochs-small");
    EXPECT_EQ(m->resource_name, "vfiod.io/mbochs-small");
    auto g = read_mdev_host(*kernel, nullptr).mdevs.at(small1).iommu_group;
    ASSERT_TRUE(g && m->group);
    EXPECT_EQ(*m->group, *g);
    EXPECT_TRUE(kernel->exists("dev/vfio/" + std::to_string(*g)));
    EXPECT_EQ(state(s, foreign), MdevState::Foreign);
    EXPECT_EQ(find(s, foreign)->resource_name, "");
    // mtty is not loaded: its mdev is wanted, so it is shown, failed no-parent, with no group.
    ASSERT_TRUE(find(s, mtty0));
    EXPECT_EQ(find(s, mtty0)->state, MdevState::Failed);
    EXPECT_EQ(find(s, mtty0)->reason, Reason::NoParent);
    EXPECT_FALSE(find(s, mtty0)->group);
    // It loads: ready from its registration alone; it unloads: failed no-parent again.
    kernel->register_mdev_parent(mtty_parent());
    pump(s);
    EXPECT_EQ(state(s, mtty0), MdevState::Ready);
    kernel->unregister_mdev_parent("mtty");
    s.handle_mdev_events({"mtty"});  // what its MDEV_STATE=unregistered change carries
    EXPECT_EQ(state(s, mtty0), MdevState::Failed);
    EXPECT_EQ(find(s, mtty0)->reason, Reason::NoParent);
    EXPECT_EQ(state(s, small0), MdevState::Ready);  // another parent's: not touched
}

TEST_F(MdevPublished, AHeldMdevToGoIsRefusedNamingItsHolderAndGoesOnceClosed) {
    kernel->register_mdev_parent(mbochs_parent());
    write_config(kEnforce + entry("mbochs", "mbochs-small", 2));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    auto g = read_mdev_host(*kernel, nullptr).mdevs.at(small1).iommu_group;
    ASSERT_TRUE(g);
    tree.hold_open(777, "qemu-kvm", 30, "/dev/vfio/" + std::to_string(*g));
    write_config(kEnforce + entry("mbochs", "mbochs-small", 1));
    EXPECT_TRUE(s.reload().ok());
    const MdevInfo* m = find(s, small1);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->state, MdevState::Refused);
    EXPECT_EQ(m->reason, Reason::InUseMdev);
    ASSERT_EQ(m->blockers.size(), 1u);
    EXPECT_NE(m->blockers[0].find("777"), std::string::npos) << m->blockers[0];
    EXPECT_TRUE(uuids().count(small1));
    tree.remove("proc/777");  // the holder exits
    EXPECT_TRUE(s.reload().ok());
    EXPECT_FALSE(find(s, small1));  // removed: no entry wants it, so no record
    EXPECT_FALSE(uuids().count(small1));
    EXPECT_EQ(state(s, small0), MdevState::Ready);
}

// An mdev's own events are no trigger (DESIGN §12): one of vfiod's removed by hand shows
// pending, and is made again on the next trigger (here its parent's registration); a create
// failing in the probe, whose add and remove come as events, is not tried again by them.
TEST_F(MdevPublished, AnMdevsOwnEventPublishesItsParentAndWritesNothing) {
    kernel->register_mdev_parent(mbochs_parent());
    write_config(kEnforce + entry("mbochs", "mbochs-small", 1));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    ASSERT_EQ(state(s, small0), MdevState::Ready);
    ASSERT_EQ(kernel->write(mdev_paths::remove_file(small0), "1"), 0);
    const size_t before = kernel->writes().size();
    s.handle_mdev_changes({small0});  // its remove uevent
    EXPECT_EQ(state(s, small0), MdevState::Pending);
    EXPECT_FALSE(find(s, small0)->group);
    EXPECT_EQ(kernel->writes().size(), before);
    kernel->fail_mdev_probe("mbochs", EIO);
    s.handle_mdev_events({"mbochs"});
    EXPECT_EQ(state(s, small0), MdevState::Failed);
    EXPECT_EQ(kernel->writes().size(), before + 1);  // one create, failed in the probe
    s.handle_mdev_changes({small0});  // the failed create's own add and remove
    EXPECT_EQ(kernel->writes().size(), before + 1);
    EXPECT_EQ(state(s, small0), MdevState::Failed);  // as its operation left it, not re-read
    kernel->fail_mdev_probe("mbochs", 0);
    s.handle_mdev_events({"mbochs"});
    EXPECT_EQ(state(s, small0), MdevState::Ready);
}

TEST_F(MdevPublished, AForeignMdevMadeWhileRunningIsPublishedFromItsEvents) {
    kernel->register_mdev_parent(mbochs_parent());
    write_config(kEnforce + entry("mbochs", "mbochs-small", 1));
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", "mbochs-small"), foreign), 0);
    s.handle_mdev_changes({foreign});
    EXPECT_EQ(state(s, foreign), MdevState::Foreign);
    ASSERT_EQ(kernel->write(mdev_paths::remove_file(foreign), "1"), 0);
    s.handle_mdev_changes({foreign});
    EXPECT_FALSE(find(s, foreign));
    // A Reload dropping the last [[mdev]] entry takes every record with it.
    write_config(kEnforce);
    EXPECT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_TRUE(s.inventory().mdevs.empty());
    EXPECT_TRUE(uuids().count(small0));  // kept: a parent no entry governs keeps its mdevs
}

// A journal entry left over or planted (DESIGN §12) is settled at start, logged and removed,
// and writes nothing: not to a foreign mdev it names, nor to one of vfiod's own beyond what the
// plan wants. An entry under another UUID's name is left alone.
TEST_F(MdevService, AJournalEntryIsSettledAtStartAndNeverWritesToAForeignMdev) {
    kernel->register_mdev_parent(mbochs_parent());
    const std::string foreign = "0a1b2c3d-0000-4000-8000-000000000001";
    ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", "mbochs-small"), foreign), 0);
    const std::string own = mdev_uuid("mbochs", "mbochs-small", 0);
    tree.write_file("run/vfiod/mdev-" + foreign,
                    serialize(MdevJournalEntry{foreign, "mbochs", "mbochs-small", false,
                                               MdevJournalEntry::Phase::Stuck}));
    tree.write_file("run/vfiod/mdev-" + own,
                    serialize(MdevJournalEntry{own, "mbochs", "mbochs-small", false, {}}));
    const std::string misnamed = "run/vfiod/mdev-0a1b2c3d-0000-4000-8000-000000000002";
    tree.write_file(misnamed, serialize(MdevJournalEntry{foreign, "mbochs", "mbochs-small",
                                                         false, {}}));
    write_config(kEnforce + entry("mbochs", "mbochs-small", 1));
    const size_t before = kernel->writes().size();
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    EXPECT_EQ(uuids(), (std::set<std::string>{foreign, own}));
    const auto writes = kernel->writes();
    ASSERT_EQ(writes.size(), before + 1);  // own's create; no remove of either
    EXPECT_EQ(writes.back().path, mdev_paths::create_file("mbochs", "mbochs-small"));
    EXPECT_EQ(writes.back().value, own);
    EXPECT_FALSE(kernel->exists("run/vfiod/mdev-" + foreign));
    EXPECT_FALSE(kernel->exists("run/vfiod/mdev-" + own));
    EXPECT_TRUE(kernel->exists(misnamed));
}

// The fake kernel, counting the listings that grow with the number of mdevs: the mdev bus
// (sys/bus/mdev/devices) and the processes whose fds a use check walks (proc).
class CountingKernel final : public FakeKernel {
public:
    using FakeKernel::FakeKernel;
    std::vector<std::string> list(std::string_view rel, int* err = nullptr) const override {
        if (rel == mdev_paths::kDevices)
            ++mdev_bus_;
        if (rel == "proc")
            ++proc_;
        return FakeKernel::list(rel, err);
    }
    // The listings since the last call: (mdev bus, proc).
    std::pair<unsigned, unsigned> take() { return {mdev_bus_.exchange(0), proc_.exchange(0)}; }

private:
    mutable std::atomic<unsigned> mdev_bus_{0};
    mutable std::atomic<unsigned> proc_{0};
};

struct MdevTriggerCost : MdevService {
    MdevTriggerCost() {
        tree.add_driver("vfio-pci");
        auto counting = std::make_unique<CountingKernel>(tree);
        counter = counting.get();
        kernel = std::move(counting);
        listen();
        kernel->register_mdev_parent(mbochs_parent());
        // The NIC for an operator's Bind and Release; two mbochs pairs vfiod makes, and an mtty
        // pair refused (no-parent) until mtty loads.
        write_config(kEnforce + "[[device]]\naddress = \"0000:00:02.0\"\n\n" +
                     entry("mbochs", "mbochs-small", 2) + entry("mbochs", "mbochs-large", 1) +
                     entry("mtty", "mtty-2", 1));
    }
    CountingKernel* counter = nullptr;
};

TEST_F(MdevTriggerCost, ARetryQueuesOnlyTheRefusedPairsAndWalksNoProcesses) {
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    ASSERT_EQ(uuids().size(), 3u);
    counter->take();
    // A release retries the waiting PFs and mdev pairs (DESIGN §11): the mtty pair alone is
    // planned again, from a read of its parent, never of the mdev bus, and no use check (it
    // removes nothing). The one walk of proc is the release's own, for its group's users.
    ASSERT_TRUE(s.release("0000:00:02.0").ok());
    pump(s);
    EXPECT_EQ(counter->take(), std::make_pair(0u, 1u));
    ASSERT_TRUE(s.bind("0000:00:02.0").ok());
    pump(s);
    EXPECT_EQ(counter->take(), std::make_pair(0u, 1u));
}

TEST_F(MdevTriggerCost, ARegistrationPlansItsParentsPairsAloneAndSettlesThem) {
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    counter->take();
    kernel->register_mdev_parent(mtty_parent());
    pump(s);  // the event and its pair read the parent alone, never the mdev bus
    EXPECT_EQ(counter->take(), std::make_pair(0u, 0u));
    EXPECT_TRUE(uuids().count(mdev_uuid("mtty", "mtty-2", 0)));
    counter->take();
    // Every pair settled: a release plans none again (its one walk of proc is its group's).
    ASSERT_TRUE(s.release("0000:00:02.0").ok());
    pump(s);
    EXPECT_EQ(counter->take(), std::make_pair(0u, 1u));
}

TEST_F(MdevTriggerCost, OnlyAPairWithARemoveWalksTheProcesses) {
    Service s(*kernel, {});
    ASSERT_TRUE(s.start());
    pump(s);
    counter->take();
    // mbochs announcing itself again: its two pairs, each reading mbochs alone, no walk.
    s.handle_mdev_events({"mbochs"});
    pump(s);
    EXPECT_EQ(counter->take(), std::make_pair(0u, 0u));
    // vfiod's own at index 2, left over above count 2: the small pair removes it, after a
    // check of who holds it open as it plans and another just before the write.
    const std::string extra = mdev_uuid("mbochs", "mbochs-small", 2);
    ASSERT_EQ(kernel->write(mdev_paths::create_file("mbochs", "mbochs-small"), extra), 0);
    counter->take();
    s.handle_mdev_events({"mbochs"});
    pump(s);
    EXPECT_EQ(counter->take().second, 2u);
    EXPECT_FALSE(uuids().count(extra));
}

}  // namespace
}  // namespace vfiod::test
