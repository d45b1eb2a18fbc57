// vfiod-mkfixture SCENARIO DIR: lay out a named synthetic host tree in DIR (which must not
// exist), for the demo and the integration tests.
#include <cstdio>
#include <filesystem>
#include <string>

#include "scenarios.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: vfiod-mkfixture SCENARIO DIR\nscenarios:");
        for (const auto& n : vfiod::test::scenario_names())
            std::fprintf(stderr, " %s", n.c_str());
        std::fprintf(stderr, "\n");
        return 2;
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(argv[2], ec)) {
        std::fprintf(stderr, "vfiod-mkfixture: %s already exists\n", argv[2]);
        return 2;
    }
    vfiod::test::FakeTree tree;
    if (!vfiod::test::build_scenario(argv[1], tree)) {
        std::fprintf(stderr, "vfiod-mkfixture: unknown scenario '%s'\n", argv[1]);
        return 2;
    }
    fs::copy(tree.root(), argv[2], fs::copy_options::recursive | fs::copy_options::copy_symlinks,
             ec);
    if (ec) {
        std::fprintf(stderr, "vfiod-mkfixture: copying to %s: %s\n", argv[2], ec.message().c_str());
        return 1;
    }
    return 0;
}
