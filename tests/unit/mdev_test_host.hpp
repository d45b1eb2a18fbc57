// What the mdev tests share: a host of the fake kernel with a NIC and a GPU (IOMMU groups 0 and
// 1, so the first mdev's group is 2), and no mdev parent yet; the kernel notes what is listed
// and read of it, so a test can tell how often a file was asked for.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fake_kernel.hpp"

namespace vfiod::test {

class NotingKernel final : public FakeKernel {
public:
    using FakeKernel::FakeKernel;

    std::optional<std::string> read(std::string_view rel, size_t max, std::string* why,
                                    const Dir* in) const override {
        note(rel);
        return FakeKernel::read(rel, max, why, in);
    }
    std::vector<std::string> list(std::string_view rel, int* err) const override {
        note(rel);
        return FakeKernel::list(rel, err);
    }
    // The paths read or listed since the last call, in order.
    std::vector<std::string> take_noted() {
        std::lock_guard lock(m_);
        return std::exchange(noted_, {});
    }

private:
    void note(std::string_view rel) const {
        std::lock_guard lock(m_);
        noted_.emplace_back(rel);
    }
    mutable std::mutex m_;
    mutable std::vector<std::string> noted_;
};

struct FakeMdevHost {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    NotingKernel* noting = nullptr;  // kernel's

    FakeMdevHost() {
        tree.enable_iommu();
        tree.add_function(FakeTree::pci("0000:00:02.0", "1af4", "1041", "020000", "virtio-pci", 0));
        tree.add_function(FakeTree::pci("0000:00:03.0", "10de", "1eb8", "030200", "nvidia", 1));
        auto k = std::make_unique<NotingKernel>(tree);
        noting = k.get();
        kernel = std::move(k);
    }
};

}  // namespace vfiod::test
