// vfiod-fake-kernel (tests/integration, never installed): vfiod with vfiod's own command line,
// but --root names a synthetic host (support/scenarios) laid out in a temporary tree whose
// writes the fake kernel carries out, so consumers see real binds and releases. It prints
// "root=TREE" once the tree is there; the tree goes on exit. "<scenario>+mbochs" is the scenario
// with the kernel's sample mdev parent mbochs registered (its module loaded before vfiod), whose
// mdevs vfiod makes and removes on the fake kernel (DESIGN §12); "+vgpu", with 8 vGPU-like
// parents vgpu0..vgpu7 (fake_mdev's vgpu_parent) instead, room for 512 vgpu-1q mdevs.
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "app/daemon.hpp"
#include "fake_kernel.hpp"
#include "scenarios.hpp"

int main(int argc, char** argv) {
    vfiod::DaemonOptions options;
    if (auto code = vfiod::begin_vfiod(argc, argv, &options))
        return *code;
    vfiod::test::FakeTree tree;
    std::string scenario = options.root;
    std::vector<vfiod::test::MdevParentSpec> parents;
    if (scenario.ends_with("+mbochs")) {
        parents.push_back(vfiod::test::mbochs_parent());
    } else if (scenario.ends_with("+vgpu")) {
        for (unsigned i = 0; i < 8; ++i)
            parents.push_back(vfiod::test::vgpu_parent(i));
    }
    if (!parents.empty())
        scenario.resize(scenario.rfind('+'));
    if (!vfiod::test::build_scenario(scenario, tree)) {
        spdlog::critical("unknown scenario {}", options.root);
        return 2;
    }
    vfiod::test::FakeKernel fs(tree);
    for (const auto& p : parents)
        fs.register_mdev_parent(p, false);
    std::printf("root=%s\n", tree.root().c_str());
    std::fflush(stdout);
    return vfiod::run_daemon(fs, options);
}
