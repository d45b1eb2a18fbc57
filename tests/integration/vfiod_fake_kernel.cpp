// A test-only vfiod: the real service, D-Bus objects and event loop, in enforce mode on the fake
// kernel (tests/support/fake_kernel) over a synthetic host, so that D-Bus consumers see groups
// bound, released and rebound without a real /sys. Never installed.
// Usage: vfiod-fake-kernel SCENARIO CONFIG — prints "root=DIR" (the tree) once it owns
// org.vfiod1; SIGHUP reloads CONFIG; SIGTERM ends it and removes the tree.
#include <cstdio>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "scenarios.hpp"
#include "service/authorization.hpp"
#include "service/dbus_objects.hpp"
#include "service/event_loop.hpp"
#include "service/logging.hpp"
#include "service/service.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: vfiod-fake-kernel SCENARIO CONFIG\n");
        return 2;
    }
    vfiod::setup_logging(true, "vfiod-fake-kernel");
    vfiod::block_signals();
    vfiod::test::FakeTree tree;
    if (!vfiod::test::build_scenario(argv[1], tree)) {
        std::fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    vfiod::test::FakeKernel kernel(tree);
    std::unique_ptr<sdbus::IConnection> bus;
    try {
        bus = sdbus::createSystemBusConnection();
    } catch (const sdbus::Error& e) {
        spdlog::critical("cannot connect to the system bus: {}", e.getMessage());
        return 1;
    }
    vfiod::Service service(kernel, {.config_file = std::string(argv[2]), .force_observe = false});
    vfiod::Authorizer auth(*bus);
    vfiod::DbusObjects objects(*bus, service, auth);
    service.set_on_change([&objects](const vfiod::Inventory& inv) { objects.publish(inv); });
    if (!service.start())
        return 2;
    objects.publish(service.inventory());
    bus->requestName("org.vfiod1");
    std::printf("root=%s\n", tree.root().c_str());
    std::fflush(stdout);
    return vfiod::run_event_loop(*bus, service, nullptr);
}
