// The fenced view reaches the host only through the HostFs it wraps: every method goes to the
// wrapped host (a recorder here, whose answers differ from the tree under its root), never to a
// tree of the fence's own; and a fenced function's files are not read at all. The host model
// keeps a fenced function's last record meanwhile, and reads it afresh once it is unfenced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string>
#include <vector>

#include "fake_tree.hpp"
#include "io/fenced_host_fs.hpp"
#include "io/host_use.hpp"
#include "service/host_model.hpp"

using namespace vfiod;
using test::FakeTree;

namespace {

const std::string kAttr = "sys/bus/pci/devices/0000:01:00.0/vendor";

// Says "recorded" to everything, and remembers which method was asked about which path. Its
// root is a real tree whose files say otherwise, so an answer read from the tree shows.
class RecordingHost : public HostFs {
public:
    explicit RecordingHost(std::string root) : root_(std::move(root)) {}

    const std::string& root() const override { return root_; }
    Dir open_dir(std::string_view rel) const override {
        note("open_dir", rel);
        return Dir();  // !ok(): the tree's directory would open
    }
    std::optional<std::string> read(std::string_view rel, size_t, std::string*,
                                    const Dir*) const override {
        note("read", rel);
        return "recorded";
    }
    std::optional<std::string> readlink(std::string_view rel, const Dir*) const override {
        note("readlink", rel);
        return "../recorded";
    }
    WholeFile read_whole(std::string_view rel, size_t) const override {
        note("read_whole", rel);
        WholeFile f;
        f.status = WholeFile::Status::Ok;
        f.bytes = "recorded\n";
        return f;
    }
    std::vector<std::string> list(std::string_view rel, int* err) const override {
        note("list", rel);
        if (err)
            *err = EXDEV;  // the tree's directory lists fine
        return {"recorded"};
    }
    bool exists(std::string_view rel, const Dir*) const override {
        note("exists", rel);
        return false;  // the tree has every path asked about
    }
    std::optional<std::string> resolve(std::string_view rel) const override {
        note("resolve", rel);
        return "recorded";
    }
    bool leads_somewhere(std::string_view rel) const override {
        note("leads_somewhere", rel);
        return false;
    }
    std::optional<std::pair<unsigned, unsigned>> char_device(std::string_view rel) const override {
        note("char_device", rel);
        return std::make_pair(7u, 7u);  // a tree never has one
    }
    std::optional<unsigned long> inode(std::string_view rel) const override {
        note("inode", rel);
        return 7;
    }
    int probe_exclusive(std::string_view rel) const override {
        note("probe_exclusive", rel);
        return EBUSY;  // a tree answers EOPNOTSUPP
    }
    std::vector<Link> links(std::string_view rel, std::string_view) const override {
        note("links", rel);
        return {Link{"recorded", "recorded", std::nullopt}};
    }
    int write(std::string_view rel, std::string_view) override {
        note("write", rel);
        return 0;
    }
    Fd open_own_dir(std::string_view rel, bool, int* err) const override {
        note("open_own_dir", rel);
        *err = ENOTSUP;  // the tree's run/vfiod would open
        return Fd();
    }

    // Method and path of every call, const ones included (a test double, not a host).
    mutable std::multiset<std::string> calls;

private:
    void note(const char* method, std::string_view rel) const {
        calls.insert(std::string(method) + " " + std::string(rel));
    }
    std::string root_;
};

class FencedHostFsTest : public ::testing::Test {
protected:
    FencedHostFsTest() {
        tree.add_function(FakeTree::pci("0000:01:00.0", "8086", "10d3", "020000",
                                                  "e1000e", 6));
        tree.write_file("sys/dir/file", "tree");
        tree.symlink("sys/dir/link", "file");
        tree.write_file("run/vfiod/x", "tree");
    }
    FakeTree tree;
    RecordingHost host{tree.root()};
    FencedHostFs view{host};
};

// Every method of HostFs, asked through the fence, is answered by the wrapped host: none by
// the tree under the shared root. A method added to HostFs belongs here too (and the fence does
// not compile until it implements it).
TEST_F(FencedHostFsTest, EveryMethodReachesTheWrappedHostNeverTheTree) {
    EXPECT_EQ(view.root(), tree.root());
    EXPECT_FALSE(view.open_dir("sys/dir").ok());
    EXPECT_EQ(view.read("sys/dir/file"), "recorded");
    EXPECT_EQ(view.readlink("sys/dir/link"), "../recorded");
    EXPECT_EQ(view.link_name("sys/dir/link"), "recorded");
    EXPECT_EQ(view.read_whole("sys/dir/file", 100).bytes, "recorded\n");
    int list_err = 0;
    EXPECT_EQ(view.list("sys/dir", &list_err), std::vector<std::string>{"recorded"});
    EXPECT_EQ(list_err, EXDEV);
    EXPECT_FALSE(view.exists("sys/dir/file"));
    EXPECT_EQ(view.resolve("sys/dir/link"), "recorded");
    EXPECT_FALSE(view.leads_somewhere("sys/dir/link"));
    EXPECT_EQ(view.char_device("sys/dir/file"), std::make_pair(7u, 7u));
    EXPECT_EQ(view.inode("sys/dir/file"), 7ul);
    EXPECT_EQ(view.probe_exclusive("dev/sda"), EBUSY);
    auto links = view.links("sys/dir");
    ASSERT_EQ(links.size(), 1u);
    EXPECT_EQ(links[0].target, "recorded");
    int err = 0;
    EXPECT_LT(view.open_own_dir("run/vfiod", false, &err).get(), 0);
    EXPECT_EQ(err, ENOTSUP);

    EXPECT_EQ(host.calls, (std::multiset<std::string>{
                              "open_dir sys/dir", "read sys/dir/file", "read_whole sys/dir/file",
                              "readlink sys/dir/link",
                              "readlink sys/dir/link", "list sys/dir", "exists sys/dir/file",
                              "resolve sys/dir/link", "leads_somewhere sys/dir/link",
                              "char_device sys/dir/file", "inode sys/dir/file",
                              "probe_exclusive dev/sda", "links sys/dir",
                              "open_own_dir run/vfiod"}));
}

// The loop writes nothing: the fence refuses without asking the host.
TEST_F(FencedHostFsTest, WritesAreRefusedAndNeverReachTheHost) {
    EXPECT_EQ(view.write(kAttr, "x"), EROFS);
    EXPECT_TRUE(host.calls.empty());
}

// A fenced function's files answer nothing, without a read of the host (the read that would
// sleep on the device lock): its attributes, through any of its directories, and the files of
// the devices under it. Another function's files are read; unfenced, its own are read again.
TEST_F(FencedHostFsTest, AFencedFunctionsFilesAreRefusedWithoutAskingTheHost) {
    const auto fn = *PciAddress::parse("0000:01:00.0");
    const std::string canonical = "sys/devices/pci0000:00/0000:01:00.0/numa_node";
    const std::string disk = "sys/devices/pci0000:00/0000:01:00.0/nvme/nvme0/nvme0n1/dev";
    const std::string other = "sys/bus/pci/devices/0000:02:00.0/vendor";
    EXPECT_EQ(view.read(kAttr), "recorded");
    view.fence(fn);
    EXPECT_EQ(view.read(kAttr), std::nullopt);
    EXPECT_EQ(view.read(canonical), std::nullopt);
    EXPECT_EQ(view.read(disk), std::nullopt);
    EXPECT_EQ(view.read(other), "recorded");
    EXPECT_EQ(host.calls, (std::multiset<std::string>{"read " + kAttr, "read " + other}));
    view.unfence(fn);
    EXPECT_EQ(view.read(kAttr), "recorded");
    EXPECT_EQ(host.calls.count("read " + kAttr), 2u);
}

// An mdev parent fenced by name (DESIGN §12: a write of its is in flight or stuck): its types'
// files are refused without asking the host, through the class link or a PCI parent's own
// directory; the PCI parent's other attributes, and other parents' types, are read. A fenced
// mdev UUID's files are refused; the name elsewhere in a path is no fence.
TEST_F(FencedHostFsTest, FencedMdevNamesRefuseTheirTypesAndTheirMdevsFiles) {
    const std::string uuid = "6d966230-f3a1-5551-97f3-4aec0da0213a";
    const std::string avail = "sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/"
                              "available_instances";
    const std::string pci_avail = "sys/devices/pci0000:00/0000:3b:00.0/mdev_supported_types/"
                                  "nvidia-222/available_instances";
    const std::string pci_vendor = "sys/devices/pci0000:00/0000:3b:00.0/vendor";
    const std::string other = "sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/name";
    const std::string mdev_file = "sys/bus/mdev/devices/" + uuid + "/remove";
    const std::string same_name = "sys/class/mbochs/mbochs/uevent";
    view.fence_mdev_names({"mbochs", "0000:3b:00.0", uuid});
    EXPECT_EQ(view.read(avail), std::nullopt);
    EXPECT_EQ(view.read(pci_avail), std::nullopt);
    EXPECT_EQ(view.read(mdev_file), std::nullopt);
    EXPECT_EQ(view.read_whole(avail, 100).err, EBUSY);
    EXPECT_EQ(view.read(pci_vendor), "recorded");
    EXPECT_EQ(view.read(other), "recorded");
    EXPECT_EQ(view.read(same_name), "recorded");
    EXPECT_EQ(host.calls, (std::multiset<std::string>{"read " + pci_vendor, "read " + other,
                                                      "read " + same_name}));
    view.fence_mdev_names({});
    EXPECT_EQ(view.read(avail), "recorded");
}

// read_whole() of a fenced function's file is refused without asking the host; unfenced, or
// outside any function (a config file), it reaches the host.
TEST_F(FencedHostFsTest, AFencedFunctionsFileIsNotReadWhole) {
    const auto fn = *PciAddress::parse("0000:01:00.0");
    view.fence(fn);
    auto f = view.read_whole(kAttr, 100);
    EXPECT_EQ(f.status, HostFs::WholeFile::Status::Failed);
    EXPECT_EQ(f.err, EBUSY);
    EXPECT_EQ(view.read_whole("etc/vfiod/vfiod.toml", 100).status, HostFs::WholeFile::Status::Ok);
    view.unfence(fn);
    EXPECT_EQ(view.read_whole(kAttr, 100).status, HostFs::WholeFile::Status::Ok);
    EXPECT_EQ(host.calls, (std::multiset<std::string>{"read_whole etc/vfiod/vfiod.toml",
                                                      "read_whole " + kAttr}));
}

// The host model over a host that notes every file read: the fenced view is the model's own,
// so what reaches this host is what the loop would read.
class CountingHost : public KernelHostFs {
public:
    using KernelHostFs::KernelHostFs;
    std::optional<std::string> read(std::string_view rel, size_t max_bytes, std::string* why,
                                    const Dir* in) const override {
        reads.emplace_back(rel);
        return KernelHostFs::read(rel, max_bytes, why, in);
    }
    WholeFile read_whole(std::string_view rel, size_t max_bytes) const override {
        reads.emplace_back(rel);
        return KernelHostFs::read_whole(rel, max_bytes);
    }
    // The files read of function `a` (its own and its devices'), forgotten after.
    std::vector<std::string> take_reads_of(const PciAddress& a) const {
        std::vector<std::string> out;
        for (const auto& r : reads)
            if (nearest_function(r) == a)
                out.push_back(r);
        reads.clear();
        return out;
    }

    mutable std::vector<std::string> reads;  // a test double's log, const reads included
};

class FencedModelTest : public ::testing::Test {
protected:
    FencedModelTest() {
        tree.enable_iommu();
        tree.add_function(FakeTree::pci(kGpu, "10de", "1eb8", "030200", "nvidia", 13));
        tree.add_function(FakeTree::pci(kNic, "8086", "10d3", "020000", "e1000e", 14));
    }
    void set_fenced(const std::vector<PciAddress>& stuck) { model.refresh_fences(stuck); }
    const PciFunction* gpu() const { return model.snapshot().topology.find(gpu_); }
    // The GPU's attribute files as a write to it leaves them, and its driver link.
    void gpu_written() {
        tree.write_file(tree.devpath(kGpu) + "/driver_override", "vfio-pci\n");
        tree.write_file(tree.devpath(kGpu) + "/numa_node", "1\n");
        tree.unbind(kGpu);
    }

    static constexpr const char* kGpu = "0000:01:00.0";
    static constexpr const char* kNic = "0000:02:00.0";
    const PciAddress gpu_ = *PciAddress::parse(kGpu);
    const PciAddress nic_ = *PciAddress::parse(kNic);
    FakeTree tree;
    CountingHost host{tree.root()};
    HostModel model{host};
};

// While a write runs, nothing of the function's files is read, by a refresh of it or a whole
// re-read (a Reload): the snapshot shows the attributes of its last record. Its links take no
// device lock and are read as ever (the driver it is on now). Others are read as usual.
TEST_F(FencedModelTest, AFencedFunctionIsNotReadAndKeepsItsLastRecord) {
    model.reread();
    ASSERT_TRUE(gpu());
    const PciFunction before = *gpu();
    EXPECT_EQ(before.driver_override, "");
    EXPECT_EQ(before.numa_node, -1);
    EXPECT_FALSE(host.take_reads_of(gpu_).empty());

    model.fence_group(13, {gpu_});
    set_fenced({});
    gpu_written();
    tree.write_file(tree.devpath(kNic) + "/numa_node", "1\n");
    model.refresh({gpu_, nic_});
    EXPECT_EQ(host.take_reads_of(gpu_), std::vector<std::string>{});
    ASSERT_TRUE(gpu());
    PciFunction kept = before;
    kept.driver = "";
    EXPECT_EQ(*gpu(), kept);
    EXPECT_EQ(model.snapshot().topology.find(nic_)->numa_node, 1);

    model.reread();
    EXPECT_EQ(host.take_reads_of(gpu_), std::vector<std::string>{});
    ASSERT_TRUE(gpu());
    EXPECT_EQ(*gpu(), kept);
    EXPECT_TRUE(model.snapshot().warnings.empty());
}

// Unfenced, the function is read afresh: the values the write left.
TEST_F(FencedModelTest, AnUnfencedFunctionIsReadAfresh) {
    model.reread();
    model.fence_group(13, {gpu_});
    set_fenced({});
    gpu_written();
    model.refresh({gpu_});
    ASSERT_TRUE(gpu());
    EXPECT_EQ(gpu()->driver_override, "");

    model.unfence_group(13);
    set_fenced({});
    host.reads.clear();
    model.refresh({gpu_});
    EXPECT_FALSE(host.take_reads_of(gpu_).empty());
    ASSERT_TRUE(gpu());
    EXPECT_EQ(gpu()->driver_override, "vfio-pci");
    EXPECT_EQ(gpu()->numa_node, 1);
}

// A function fenced before it was ever read (at start, the last run's unfinished write may still
// hold its device lock) has no record: it is left out, as a function whose vendor cannot be
// read is, and its group still lists it; its files are not read. Unfenced, it is read.
TEST_F(FencedModelTest, AFunctionFirstSeenWhileFencedIsLeftOutUntilUnfenced) {
    model.fence_group(13, {gpu_});
    set_fenced({});
    model.reread();
    EXPECT_EQ(host.take_reads_of(gpu_), std::vector<std::string>{});
    EXPECT_EQ(gpu(), nullptr);
    EXPECT_EQ(model.snapshot().topology.groups.at(13), std::vector<PciAddress>{gpu_});
    EXPECT_EQ(model.snapshot().warnings,
              std::vector<std::string>{"skipping PCI function 0000:01:00.0: cannot read vendor"});
    model.refresh({gpu_});
    EXPECT_EQ(host.take_reads_of(gpu_), std::vector<std::string>{});
    EXPECT_EQ(gpu(), nullptr);

    model.unfence_group(13);
    set_fenced({});
    model.refresh({gpu_});
    EXPECT_FALSE(host.take_reads_of(gpu_).empty());
    ASSERT_TRUE(gpu());
    EXPECT_EQ(gpu()->vendor, 0x10de);
}

// What the host uses a function for is part of its record: a function whose write is stuck keeps
// its findings (here a user's enable count on vfio-pci) without its enable file being read, by a
// refresh or a whole re-read; unstuck, they are read afresh.
TEST_F(FencedModelTest, AStuckFunctionKeepsWhatTheHostUsesItFor) {
    tree.unbind(kGpu);
    tree.bind(kGpu, "vfio-pci");
    tree.write_file(tree.devpath(kGpu) + "/enable", "1\n");
    model.reread();
    const std::vector<std::string> enabled{"the device is enabled by a user (enable=1)"};
    EXPECT_EQ(model.snapshot().use.vfio.at(gpu_), enabled);

    set_fenced({gpu_});
    tree.write_file(tree.devpath(kGpu) + "/enable", "0\n");
    host.reads.clear();
    model.refresh({gpu_});
    EXPECT_EQ(model.snapshot().use.vfio.at(gpu_), enabled);
    model.reread();
    EXPECT_EQ(model.snapshot().use.vfio.at(gpu_), enabled);
    EXPECT_EQ(host.take_reads_of(gpu_), std::vector<std::string>{});

    set_fenced({});
    model.refresh({gpu_});
    EXPECT_EQ(model.snapshot().use.vfio.count(gpu_), 0u);
    EXPECT_FALSE(host.take_reads_of(gpu_).empty());
}

}  // namespace
