// The executor tests' host, shared with the tests of what runs beside it (vfio use, the fake
// kernel): a two-function GPU group behind a bridge and a NIC, the fake kernel over it, the
// journal and the executor, restartable like a daemon.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "core/plan.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "io/topology_reader.hpp"
#include "io/vfio_use.hpp"

namespace vfiod::test::world {

using namespace std::chrono_literals;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;

inline PciAddress A(const char* s) { return *PciAddress::parse(s); }

inline const char* kGpu = "0000:01:00.0";
inline const char* kAudio = "0000:01:00.1";
inline const char* kPort = "0000:00:1c.0";  // shares group 13 (no ACS): never written
inline const char* kNic = "0000:02:00.0";   // group 14


inline void build_host(FakeTree& t, bool with_vfio = true) {
    t.enable_iommu();
    t.add_function(FakeTree::pci(kPort, "8086", "a33c", "060400", "pcieport", 13));
    t.add_function(FakeTree::pci(kGpu, "10de", "2331", "030200", "nvidia", 13, kPort));
    t.add_function(FakeTree::pci(kAudio, "10de", "22a3", "040300", "snd_hda_intel", 13, kPort));
    t.add_function(FakeTree::pci(kNic, "8086", "1533", "020000", "igb", 14));
    if (with_vfio)
        t.add_driver("vfio-pci");
}

// One host: the synthetic tree, the fake kernel over it, the journal and the executor.
struct World {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    std::unique_ptr<Journal> journal;
    std::unique_ptr<Executor> exec;
    Config config;

    enum Host { kFull, kNoVfio, kEmpty };  // kEmpty: the caller lays out the tree

    explicit World(Host host = kFull, std::chrono::milliseconds timeout = 5s) {
        if (host != kEmpty)
            build_host(tree, host == kFull);
        start(timeout);
        for (uint16_t device : {0x2331, 0x1533}) {
            DeviceEntry e;
            e.selector = Selector{static_cast<uint16_t>(device == 0x2331 ? 0x10de : 0x8086), device};
            config.devices.push_back(e);
        }
    }
    // A (re)started daemon over the same tree.
    void start(std::chrono::milliseconds timeout = 5s) {
        exec.reset();
        journal.reset();
        kernel = std::make_unique<FakeKernel>(tree);
        kernel->set_native_driver(kGpu, "nvidia");
        kernel->set_native_driver(kAudio, "snd_hda_intel");
        kernel->set_native_driver(kNic, "igb");
        journal = std::make_unique<Journal>(*kernel);
        exec = std::make_unique<Executor>(*kernel, journal.get(), timeout);
    }
    Topology topology() {
        std::vector<std::string> warnings;
        return read_topology(*kernel, &warnings);
    }
    GroupPlan plan(unsigned group) {
        Plan p = make_plan(topology(), HostUse{}, config);
        for (auto& g : p.groups)
            if (g.group == group)
                return g;
        ADD_FAILURE() << "no plan for group " << group;
        return {};
    }
    GroupPlan release_plan(unsigned group) {
        Topology topo = topology();
        HostUse use;
        read_vfio_use(*kernel, topo, &use);
        auto e = journal->load(group);
        return plan_release(topo, use, group, e ? e->originals() : std::map<PciAddress, std::string>{});
    }
    std::string driver(const char* bdf) const {
        return kernel->link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver").value_or("");
    }
    std::string override_of(const char* bdf) const {
        return kernel->read(std::string("sys/bus/pci/devices/") + bdf + "/driver_override").value_or("?");
    }
    bool exists(const std::string& rel) const { return kernel->exists(rel); }
};

inline void expect_original(const World& w) {
    EXPECT_EQ(w.driver(kGpu), "nvidia");
    EXPECT_EQ(w.driver(kAudio), "snd_hda_intel");
    EXPECT_EQ(w.override_of(kGpu), "(null)");
    EXPECT_EQ(w.override_of(kAudio), "(null)");
    EXPECT_EQ(w.driver(kPort), "pcieport");
}

inline void expect_bound(const World& w) {
    EXPECT_EQ(w.driver(kGpu), "vfio-pci");
    EXPECT_EQ(w.driver(kAudio), "vfio-pci");
    EXPECT_EQ(w.override_of(kGpu), "vfio-pci");
    EXPECT_EQ(w.override_of(kAudio), "vfio-pci");
    EXPECT_EQ(w.driver(kPort), "pcieport");
}


}  // namespace vfiod::test::world
