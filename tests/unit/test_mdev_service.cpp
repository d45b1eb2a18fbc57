// The daemon's mdev side (DESIGN §12) through the service, on the fake kernel: each (parent, type)
// pair an [[mdev]] entry reaches is made at start and on Reload, in config order (a later pair
// the parent's budget cannot hold is refused, the earlier kept), and a parent that registers
// while vfiod runs gets its mdevs from its MDEV_STATE=registered event, with no Reload. No
// workers: each operation runs to its end on the caller's thread.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>

#include "config_test_helpers.hpp"
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
    MdevService() {
        // What a udev monitor hears of a parent's registration: its name, the devpath's last part.
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

}  // namespace
}  // namespace vfiod::test
