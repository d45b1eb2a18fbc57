// Named host trees for end-to-end tests, the integration tests and the demo: each lays out a
// realistic host with FakeTree (sysfs, procfs and etc/vfiod/vfiod.toml).
#pragma once

#include <string>
#include <vector>

#include "fake_tree.hpp"

namespace vfiod::test {

// A GPU server: boot iGPU (protected), NVIDIA GPU + HDMI audio in one group behind a root port,
// the root NVMe (mounted as /dev/root), a routed onboard NIC and a spare NIC of another model.
void build_gpu_host(FakeTree& t);

// The names build_scenario accepts, and the builder behind each.
std::vector<std::string> scenario_names();
bool build_scenario(const std::string& name, FakeTree& t);

}  // namespace vfiod::test
