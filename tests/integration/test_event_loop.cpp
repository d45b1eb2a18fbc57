// The daemon never aborts on a runtime error: the real event loop, the real D-Bus objects on a
// private dbus-daemon and the service on the fake kernel, with publishing made to throw once
// during a udev burst and once during a SIGHUP reload. Each time the groups being published are
// published `failed`, the loop keeps answering on the bus, and the operation's own end or the
// next reload brings the true state back; SIGTERM still ends it cleanly.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <sdbus-c++/sdbus-c++.h>

#include "eventually.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "app/daemon.hpp"
#include "infra/loop.hpp"
#include "private_bus.hpp"
#include "scenarios.hpp"
#include "scripted_events.hpp"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/objects.hpp"
#include "app/event_loop.hpp"
#include "service/service.hpp"
#include "app/udev_monitor.hpp"
#include "infra/workers.hpp"

namespace vfiod::test {
namespace {

using namespace std::chrono_literals;

const char* kGpu = "0000:01:00.0";

class EventLoopTest : public ::testing::Test {
protected:
    std::string group_state(unsigned id) {
        try {
            auto proxy = sdbus::createProxy(*client_, "org.vfiod1", group_object_path(id));
            return proxy->getProperty("State").onInterface("org.vfiod1.Group").get<std::string>();
        } catch (const sdbus::Error& e) {
            return "error: " + e.getMessage();
        }
    }
    std::string group_reason(unsigned id) {
        auto proxy = sdbus::createProxy(*client_, "org.vfiod1", group_object_path(id));
        return proxy->getProperty("Reason").onInterface("org.vfiod1.Group").get<std::string>();
    }
    // A method call the loop must answer: proof that it is still serving.
    bool answers_plan() {
        try {
            auto proxy = sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1");
            std::string plan;
            proxy->callMethod("Plan").onInterface("org.vfiod1.Manager").storeResultsTo(plan);
            return plan.find("\"groups\"") != std::string::npos;
        } catch (const sdbus::Error&) {
            return false;
        }
    }
    std::string driver_of(const char* bdf) {
        return kernel_.link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver")
            .value_or("");
    }

    FakeTree tree_;
    bool built_ = (build_gpu_host(tree_), true);
    FakeKernel kernel_{tree_};
    PrivateBus bus_{tree_.root()};
    std::unique_ptr<sdbus::IConnection> client_;
};

TEST_F(EventLoopTest, PublishingThatThrowsNeverEndsTheDaemon) {
    ASSERT_TRUE(bus_.up()) << "dbus-daemon did not start";
    block_signals(daemon_signals());  // before any thread exists, as vfiod's main() does
    auto conn = sdbus::createSessionBusConnectionWithAddress(bus_.address());
    Service service(kernel_, {});
    Authorizer auth(*conn);
    CallLog call_log;
    DbusObjects objects(*conn, service, auth, call_log);
    std::atomic<int> throws_left{0};
    std::atomic<int> thrown{0};
    service.set_on_change([&](const Inventory& inv, const InventoryChange& change) {
        if (throws_left.fetch_sub(1) > 0) {
            ++thrown;
            throw sdbus::Error("org.freedesktop.DBus.Error.NoMemory", "injected publish failure");
        }
        objects.publish(inv, change);
    });
    Workers workers;  // as vfiod runs: writes off the loop
    service.set_workers(&workers);
    ASSERT_TRUE(service.start());
    conn->requestName("org.vfiod1");
    ScriptedEvents events;
    LoopHooks hooks;
    hooks.work_fd = workers.fd();
    hooks.work_ready = [&] { workers.dispatch(); };
    int rc = -1;
    std::thread loop([&] { rc = run_event_loop(*conn, service, &events, hooks); });
    client_ = sdbus::createSessionBusConnectionWithAddress(bus_.address());

    // The coldplug binds end before anything is made to throw.
    EXPECT_TRUE(eventually([&] { return group_state(13) == "bound"; })) << group_state(13);
    EXPECT_TRUE(eventually([&] { return group_state(15) == "bound"; })) << group_state(15);

    // A udev burst: someone gives the GPU back to nvidia (override cleared, unbound, probed);
    // publishing the re-assertion's `pending` step throws. Its first write hangs meanwhile, so
    // what was published can be seen.
    const std::string dev = std::string("sys/bus/pci/devices/") + kGpu;
    ASSERT_EQ(kernel_.write(dev + "/driver_override", "\n"), 0);
    ASSERT_EQ(kernel_.write(dev + "/driver/unbind", kGpu), 0);
    ASSERT_EQ(kernel_.write("sys/bus/pci/drivers_probe", kGpu), 0);
    ASSERT_EQ(driver_of(kGpu), "nvidia");
    throws_left = 1;
    kernel_.block_path(dev + "/driver_override");
    events.send("unbind", kGpu);
    events.send("bind", kGpu);
    EXPECT_TRUE(eventually([&] { return group_state(13) == "failed"; })) << group_state(13);
    EXPECT_EQ(thrown, 1);
    EXPECT_EQ(group_reason(13), "");
    EXPECT_TRUE(answers_plan());
    EXPECT_TRUE(eventually([&] { return kernel_.blocked_now() == 1; }))
        << "the re-assertion's write did not start";
    EXPECT_EQ(group_state(13), "failed");

    // The operation goes on: once its write returns, the group is published as it ends.
    kernel_.unblock();
    EXPECT_TRUE(eventually([&] { return group_state(13) == "bound"; })) << group_state(13);
    EXPECT_EQ(driver_of(kGpu), "vfio-pci");

    // A SIGHUP reload that changes what is published; publishing it throws.
    throws_left = 1;
    tree_.write_file("etc/vfiod/vfiod.toml",
                     "[[device]]\nselector = \"10de:2331\"\nresource_name = \"nvidia.com/H100\"\n"
                     "[[device]]\nselector = \"144d:a808\"\n");
    kill(getpid(), SIGHUP);
    EXPECT_TRUE(eventually([&] { return group_state(13) == "failed"; })) << group_state(13);
    EXPECT_EQ(group_state(14), "failed");
    EXPECT_EQ(group_state(15).rfind("error", 0), 0u) << "a group the reload dropped stays gone";
    EXPECT_EQ(thrown, 2);
    EXPECT_TRUE(answers_plan());
    // The next reload publishes the truth again.
    kill(getpid(), SIGHUP);
    EXPECT_TRUE(eventually([&] { return group_state(13) == "bound"; })) << group_state(13);
    EXPECT_EQ(group_state(14), "refused");
    EXPECT_EQ(group_reason(14), "in-use-storage");

    kill(getpid(), SIGTERM);
    loop.join();
    EXPECT_EQ(rc, 0) << "SIGTERM is a clean stop";
}

// Issue 10 on the incremental path (a udev burst re-reads only the functions it names, through
// other code than a full read): a host driver whose name is not UTF-8 and holds an escape is bound
// to the GPU, then the audio function's vendor becomes a FIFO. The name reaches the bus through
// PropertiesChanged as U+FFFD (sd-bus refuses invalid UTF-8, which once ended the daemon), the
// FIFO is refused rather than waited on, and the loop keeps answering throughout.
TEST_F(EventLoopTest, HostileNamesAndFilesOnTheIncrementalPath) {
    ASSERT_TRUE(bus_.up()) << "dbus-daemon did not start";
    block_signals(daemon_signals());
    ::setenv("DBUS_SYSTEM_BUS_ADDRESS", bus_.address().c_str(), 1);
    ScriptedEvents events;
    DaemonOptions options;
    options.service.force_observe = true;
    Daemon daemon(kernel_, options, &events);
    ASSERT_TRUE(daemon.start_thread());
    client_ = sdbus::createSessionBusConnectionWithAddress(bus_.address());
    auto driver_property = [&](const char* bdf) -> std::string {
        try {
            auto proxy = sdbus::createProxy(*client_, "org.vfiod1",
                                            device_object_path(*PciAddress::parse(bdf)));
            return proxy->getProperty("Driver").onInterface("org.vfiod1.Device").get<std::string>();
        } catch (const sdbus::Error& e) {
            return "error: " + e.getMessage();
        }
    };
    EXPECT_TRUE(eventually([&] { return group_state(13) == "pending"; })) << group_state(13);

    const std::string evil = "evil\xff\x1b[2J";
    tree_.bind(kGpu, evil);
    events.send("unbind", kGpu);
    events.send("bind", kGpu);
    const std::string published = "evil\xef\xbf\xbd\x1b[2J";
    EXPECT_TRUE(eventually([&] { return driver_property(kGpu) == published; }))
        << driver_property(kGpu);
    EXPECT_TRUE(answers_plan());

    const char* audio = "0000:01:00.1";
    const std::string vendor = tree_.root() + "/" + tree_.devpath(audio) + "/vendor";
    std::filesystem::remove(vendor);
    ASSERT_EQ(::mkfifo(vendor.c_str(), 0644), 0);
    events.send("change", audio);
    EXPECT_TRUE(eventually([&] { return group_state(13) == "refused"; })) << group_state(13);
    EXPECT_EQ(group_reason(13), "companion");
    EXPECT_TRUE(answers_plan());
}

}  // namespace
}  // namespace vfiod::test
