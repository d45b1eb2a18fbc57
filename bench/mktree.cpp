// vfiod-bench-tree [--bound] FUNCTIONS DIR: lay out the benchmark fleet host (fleet_tree.hpp) in DIR, which
// must not exist, with its config in DIR/etc/vfiod/vfiod.toml and what was laid out in
// DIR/bench.info (shell variables, for bench/run.sh). --bound: every VF already on vfio-pci, the
// host vfiod leaves once it has bound them (its everyday state), not one still to bind.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fleet_tree.hpp"

int main(int argc, char** argv) {
    const bool bound = argc > 1 && std::string(argv[1]) == "--bound";
    argc -= bound;
    argv += bound;
    if (argc != 3 || std::atoi(argv[1]) < 32) {
        std::fprintf(stderr, "usage: vfiod-bench-tree [--bound] FUNCTIONS(>=32) DIR\n");
        return 2;
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir = fs::absolute(argv[2]);
    if (fs::exists(dir, ec)) {
        std::fprintf(stderr, "vfiod-bench-tree: %s already exists\n", dir.c_str());
        return 2;
    }
    // Built beside DIR and renamed into place: no copy of a tree of 100k files.
    ::setenv("TMPDIR", dir.parent_path().c_str(), 1);
    vfiod::test::FakeTree t;
    auto f = vfiod::bench::build_fleet_tree(t, static_cast<unsigned>(std::atoi(argv[1])), bound);
    t.write_file("etc/vfiod/vfiod.toml", f.config);
    unsigned objects = 1 + 2 * f.vfs + 3 * f.gpus;  // the manager, groups and their devices
    t.write_file("bench.info", "functions=" + std::to_string(f.functions) +
                                   "\nroot_ports=" + std::to_string(f.root_ports) +
                                   "\nvfs=" + std::to_string(f.vfs) +
                                   "\nobjects=" + std::to_string(objects) + "\n");
    fs::rename(t.root(), dir, ec);
    if (ec) {
        std::fprintf(stderr, "vfiod-bench-tree: %s: %s\n", dir.c_str(), ec.message().c_str());
        return 1;
    }
    return 0;
}
