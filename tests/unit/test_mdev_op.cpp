// The mdev operation (service/mdev_ops) on the fake kernel, run as the service runs every
// operation (run_now): one pair planned, written through the hang-safe writer, reported.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <string>

#include "config_test_helpers.hpp"
#include "eventually.hpp"
#include "io/mdev_reader.hpp"
#include "mdev_test_host.hpp"
#include "service/mdev_ops.hpp"

namespace vfiod {
namespace {

struct NoFollowUps final : FollowUps {
    void decide(unsigned) override {}
    void retry_pfs() override {}
    void probe_left(const std::set<PciAddress>&, const PciAddress*) override {}
    void deciding(unsigned) override {}
    void check_health(unsigned, HealthCheck, const std::map<PciAddress, std::string>&) override {}
};

std::string entry(const char* type, unsigned count) {
    return "[[mdev]]\nparent = \"mbochs\"\ntype = \"" + std::string(type) +
           "\"\ncount = " + std::to_string(count) + "\n";
}

struct MdevOpTest : ::testing::Test, test::FakeMdevHost {
    NoFollowUps then;
    ServiceParts parts{*kernel, [] { return Mode::Enforce; }, then};

    MdevOpTest() { kernel->register_mdev_parent(test::mbochs_parent()); }
    OpResult run(const std::string& doc, const char* type, Mode mode = Mode::Enforce) {
        parts.host.replace_config(test::Parsed(doc));
        parts.host.reread();
        MdevOp op("mbochs", type, mode);
        OpResult r = run_now(op, parts);
        last = op.results();
        return r;
    }
    size_t count() { return read_mdev_host(*kernel, nullptr).mdevs.size(); }
    std::vector<MdevResult> last;
};

TEST_F(MdevOpTest, MakesThePairAndLeavesOtherPairsAlone) {
    const std::string doc = entry("mbochs-small", 2) + entry("mbochs-medium", 1);
    EXPECT_TRUE(run(doc, "mbochs-medium").ok());
    EXPECT_EQ(count(), 1u);
    OpResult r = run(doc, "mbochs-small");
    EXPECT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(last.size(), 2u);
    EXPECT_EQ(last[1].uuid, mdev_uuid("mbochs", "mbochs-small", 1));
    EXPECT_EQ(count(), 3u);
    // Nothing left to write: the operation ends in prepare.
    EXPECT_TRUE(run(doc, "mbochs-small").ok());
    EXPECT_TRUE(last.empty());
    // The small pair's count to 0 removes only the small ones.
    EXPECT_TRUE(run(entry("mbochs-small", 0) + entry("mbochs-medium", 1), "mbochs-small").ok());
    auto m = read_mdev_host(*kernel, nullptr);
    ASSERT_EQ(m.mdevs.size(), 1u);
    EXPECT_TRUE(m.mdevs.count(mdev_uuid("mbochs", "mbochs-medium", 0)));
}

TEST_F(MdevOpTest, ObserveModeWritesNothing) {
    EXPECT_TRUE(run(entry("mbochs-small", 2), "mbochs-small", Mode::Observe).ok());
    EXPECT_EQ(count(), 0u);
    EXPECT_TRUE(last.empty());
}

TEST_F(MdevOpTest, AHeldMdevIsRefusedAndNamed) {
    ASSERT_TRUE(run(entry("mbochs-small", 2), "mbochs-small").ok());
    auto g = read_mdev_host(*kernel, nullptr).mdevs.at(mdev_uuid("mbochs", "mbochs-small", 1))
                 .iommu_group;
    ASSERT_TRUE(g);
    tree.hold_open(777, "qemu-kvm", 30, "/dev/vfio/" + std::to_string(*g));
    // Planned on the loop already as a refusal: nothing to write, nothing written.
    OpResult r = run(entry("mbochs-small", 1), "mbochs-small");
    EXPECT_EQ(r.code, OpResult::Code::Refused);
    EXPECT_EQ(r.message.find("in-use-mdev: " + mdev_uuid("mbochs", "mbochs-small", 1) + ": "), 0u)
        << r.message;
    EXPECT_NE(r.message.find("qemu-kvm"), std::string::npos) << r.message;
    EXPECT_TRUE(last.empty());
    EXPECT_EQ(count(), 2u);
}

// prepare() reads the fenced view, never the host beneath it: with the parent fenced (a write of
// its blocked) its available_instances is not read, so nothing is created on a guess.
// A pair with an mdev to remove is planned from one read of its parent, then again with who
// holds mdevs open: the parent's types are listed once.
TEST_F(MdevOpTest, ARemoveReadsItsParentOnce) {
    ASSERT_TRUE(run(entry("mbochs-small", 2), "mbochs-small").ok());
    parts.host.replace_config(test::Parsed(entry("mbochs-small", 1)));
    parts.host.reread();
    noting->take_noted();
    MdevOp op("mbochs", "mbochs-small", Mode::Enforce);
    EXPECT_FALSE(op.prepare(parts));  // a remove to write
    ASSERT_EQ(op.plan().size(), 2u);
    EXPECT_EQ(op.plan()[1].action, MdevAction::Remove);
    unsigned listed = 0;
    for (const std::string& p : noting->take_noted())
        listed += p.ends_with(std::string("/") + mdev_paths::kTypes);
    EXPECT_EQ(listed, 1u);
}

TEST_F(MdevOpTest, PrepareReadsThroughTheFence) {
    parts.host.fence_mdevs({"mbochs"});
    OpResult r = run(entry("mbochs-small", 1), "mbochs-small");
    EXPECT_EQ(r.code, OpResult::Code::Refused);
    EXPECT_EQ(r.message.find("mdev-unavailable: "), 0u) << r.message;
    EXPECT_EQ(count(), 0u);
    parts.host.fence_mdevs({});
    EXPECT_TRUE(run(entry("mbochs-small", 1), "mbochs-small").ok());
    EXPECT_EQ(count(), 1u);
}

// A remove blocked in the kernel (the VM holds the device; no fd walk of a tree shows it): the
// operation fences the parent and the mdev while it runs, and the next one on that parent is
// refused `stuck` before any read, until the remove ends.
TEST_F(MdevOpTest, AStuckRemoveRefusesTheParentsNextOperation) {
    using namespace std::chrono_literals;
    ASSERT_TRUE(run(entry("mbochs-small", 1), "mbochs-small").ok());
    parts.mdev_writer.set_timeout(200ms);
    kernel->open_mdev_device(mdev_uuid("mbochs", "mbochs-small", 0));
    parts.host.replace_config(test::Parsed(entry("mbochs-small", 0)));
    MdevOp op("mbochs", "mbochs-small", Mode::Enforce);
    ASSERT_FALSE(op.prepare(parts));
    EXPECT_EQ(op.fenced_mdevs(), (std::set<std::string>{
                                     "mbochs", mdev_uuid("mbochs", "mbochs-small", 0)}));
    op.run(parts);
    EXPECT_EQ(op.complete(parts).message.find("stuck: "), 0u);
    OpResult r = run(entry("mbochs-small", 0), "mbochs-small");
    EXPECT_EQ(r.code, OpResult::Code::Refused);
    EXPECT_EQ(r.message.find("stuck: mbochs: "), 0u) << r.message;
    kernel->close_mdev_device(mdev_uuid("mbochs", "mbochs-small", 0));
    EXPECT_TRUE(test::eventually([&] { return parts.mdev_writer.stuck_names().empty(); }, 10s));
    EXPECT_EQ(count(), 0u);
}

// A create the driver fails: the answer is Failed, naming the first mdev and why.
TEST_F(MdevOpTest, AFailedCreateIsTheAnswer) {
    kernel->fail_mdev_probe("mbochs", ENOSPC);
    OpResult r = run(entry("mbochs-small", 2), "mbochs-small");
    EXPECT_EQ(r.code, OpResult::Code::Failed);
    EXPECT_EQ(r.message.find("write-failed: " + mdev_uuid("mbochs", "mbochs-small", 0)), 0u)
        << r.message;
    EXPECT_EQ(count(), 0u);
}

}  // namespace
}  // namespace vfiod
