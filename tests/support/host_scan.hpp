// The fixture the tests of the host-use readers share (io/host_use, io/device_use,
// io/netns_use): a fake tree to lay a host out in, and one scan of it as vfiod makes one, its
// topology read first.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_tree.hpp"
#include "io/host_use.hpp"
#include "io/topology_reader.hpp"

namespace vfiod::test {

inline PciAddress A(const char* s) { return *PciAddress::parse(s); }

class HostScan : public ::testing::Test {
protected:
    // Who uses what on `t`; the scan's own warnings (not the topology reader's) in *warnings.
    HostUse scan(std::vector<std::string>* warnings = nullptr) const {
        KernelHostFs fs(t.root());
        std::vector<std::string> topology_warnings;
        return read_host_use(fs, read_topology(fs, &topology_warnings), warnings);
    }

    FakeTree t;
};

}  // namespace vfiod::test
