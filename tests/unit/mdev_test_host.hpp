// What the mdev tests share: a host of the fake kernel with a NIC and a GPU (IOMMU groups 0 and
// 1, so the first mdev's group is 2), and no mdev parent yet.
#pragma once

#include <memory>

#include "fake_kernel.hpp"

namespace vfiod::test {

struct FakeMdevHost {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;

    FakeMdevHost() {
        tree.enable_iommu();
        tree.add_function(FakeTree::pci("0000:00:02.0", "1af4", "1041", "020000", "virtio-pci", 0));
        tree.add_function(FakeTree::pci("0000:00:03.0", "10de", "1eb8", "030200", "nvidia", 1));
        kernel = std::make_unique<FakeKernel>(tree);
    }
};

}  // namespace vfiod::test
