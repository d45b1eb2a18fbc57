// vfiod-fake-kernel (tests/integration, never installed): vfiod with vfiod's own command line,
// but --root names a synthetic host (support/scenarios) laid out in a temporary tree whose
// writes the fake kernel carries out, so consumers see real binds and releases. It prints
// "root=TREE" once the tree is there; the tree goes on exit. "<scenario>+mbochs" is the scenario
// with the kernel's sample mdev parent mbochs registered (its module loaded before vfiod), whose
// mdevs vfiod makes and removes on the fake kernel (DESIGN §12).
#include <cstdio>
#include <string>
#include <string_view>

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
    const bool mbochs = scenario.ends_with("+mbochs");
    if (mbochs)
        scenario.resize(scenario.size() - std::string_view("+mbochs").size());
    if (!vfiod::test::build_scenario(scenario, tree)) {
        spdlog::critical("unknown scenario {}", options.root);
        return 2;
    }
    vfiod::test::FakeKernel fs(tree);
    if (mbochs)
        fs.register_mdev_parent(vfiod::test::mbochs_parent(), false);
    std::printf("root=%s\n", tree.root().c_str());
    std::fflush(stdout);
    return vfiod::run_daemon(fs, options);
}
