// vfiod-fake-kernel (tests/integration, never installed): vfiod with vfiod's own command line,
// but --root names a synthetic host (support/scenarios) laid out in a temporary tree whose
// writes the fake kernel carries out, so consumers see real binds and releases. It prints
// "root=TREE" once the tree is there; the tree goes on exit. The scenario's mdev parents
// (scenario_mdev_parents: "<scenario>+mbochs" adds the kernel's sample parent mbochs, "+vgpu" 8
// vGPU-like parents with room for 512 vgpu-1q mdevs) are registered before vfiod starts, as
// drivers loaded at boot are; vfiod makes and removes their mdevs on the fake kernel.
#include <cstdio>

#include <spdlog/spdlog.h>

#include "app/daemon.hpp"
#include "fake_kernel.hpp"
#include "scenarios.hpp"

int main(int argc, char** argv) {
    vfiod::DaemonOptions options;
    if (auto code = vfiod::begin_vfiod(argc, argv, &options))
        return *code;
    vfiod::test::FakeTree tree;
    if (!vfiod::test::build_scenario(options.root, tree)) {
        spdlog::critical("unknown scenario {}", options.root);
        return 2;
    }
    vfiod::test::FakeKernel fs(tree);
    for (const auto& parent : vfiod::test::scenario_mdev_parents(options.root))
        fs.register_mdev_parent(parent, false);
    std::printf("root=%s\n", tree.root().c_str());
    std::fflush(stdout);
    return vfiod::run_daemon(fs, options);
}
