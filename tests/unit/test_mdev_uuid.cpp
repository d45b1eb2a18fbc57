// vfiod's own mdev UUIDs (DESIGN §12): name-based version 5 in vfiod's namespace, and the test
// that tells vfiod's mdevs from foreign ones.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/config.hpp"
#include "core/mdev.hpp"

namespace vfiod {
namespace {

// The namespace is itself the version-5 UUID of the DNS name "vfiod.io" (RFC 4122's DNS
// namespace 6ba7b810-9dad-11d1-80b4-00c04fd430c8), and the values below were computed
// independently (Python's uuid.uuid5) from the texts DESIGN §12 gives.
TEST(MdevUuid, KnownValues) {
    EXPECT_EQ(mdev_uuid("mbochs", "mbochs-small", 0), "6d966230-f3a1-5551-97f3-4aec0da0213a");
    EXPECT_EQ(mdev_uuid("mbochs", "mbochs-small", 1), "28d550f8-3199-5203-b180-2f24319b7451");
    EXPECT_EQ(mdev_uuid("0000:3b:00.0", "nvidia-222", 4095),
              "e7d32ce2-f984-5bcd-9636-d1f940cd16a6");
}

TEST(MdevUuid, VersionFiveCanonicalAndDistinctPerPart) {
    std::set<std::string> seen;
    for (const char* parent : {"mbochs", "mtty", "0000:3b:00.0"})
        for (const char* type : {"mbochs-small", "mtty-2"})
            for (unsigned i : {0u, 1u, 10u, 4095u}) {
                const std::string u = mdev_uuid(parent, type, i);
                EXPECT_TRUE(is_canonical_uuid(u)) << u;
                EXPECT_EQ(u[14], '5') << u;  // version 5
                EXPECT_NE(std::string("89ab").find(u[19]), std::string::npos) << u;  // variant
                EXPECT_TRUE(seen.insert(u).second) << parent << "/" << type << "/" << i;
            }
    // "<parent>/<type>/<i>" is the whole text: the same parts give the same UUID again.
    EXPECT_EQ(mdev_uuid("mbochs", "mbochs-small", 0), mdev_uuid("mbochs", "mbochs-small", 0));
}

TEST(MdevUuid, CanonicalFormIsTheKernelsLowerCase) {
    EXPECT_TRUE(is_canonical_uuid("6d966230-f3a1-5551-97f3-4aec0da0213a"));
    for (const char* bad :
         {"6D966230-F3A1-5551-97F3-4AEC0DA0213A", "6d966230f3a1555197f34aec0da0213a",
          "6d966230-f3a1-5551-97f3-4aec0da0213", "6d966230-f3a1-5551-97f3-4aec0da0213a0",
          "6d966230_f3a1-5551-97f3-4aec0da0213a", "6d966230-f3a1-5551-97f3-4aec0da0213g", "",
          "../../../../bus/pci/devices/0000:00"})
        EXPECT_FALSE(is_canonical_uuid(bad)) << bad;
}

TEST(MdevUuid, OwnIndicesAreTheFirst4096OfTheirPair) {
    OwnMdevUuids own;
    EXPECT_EQ(own.index_of("mbochs", "mbochs-small", "6d966230-f3a1-5551-97f3-4aec0da0213a"), 0u);
    EXPECT_EQ(own.index_of("mbochs", "mbochs-small", mdev_uuid("mbochs", "mbochs-small", 4095)),
              4095u);
    // Index 4096 and beyond, another pair's, or a random UUID: foreign.
    EXPECT_FALSE(own.index_of("mbochs", "mbochs-small", mdev_uuid("mbochs", "mbochs-small",
                                                                  kMaxMdevCount)));
    EXPECT_FALSE(own.index_of("mbochs", "mbochs-large", mdev_uuid("mbochs", "mbochs-small", 3)));
    EXPECT_FALSE(own.index_of("mtty", "mbochs-small", mdev_uuid("mbochs", "mbochs-small", 3)));
    EXPECT_FALSE(own.index_of("mbochs", "mbochs-small", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"));
}

// A pair's UUIDs are made on its first question only; past kMaxPairs the least recently asked
// pair goes, and is made again (and answers the same) when asked again.
TEST(MdevUuid, OwnTableMakesEachPairOnceAndKeepsABoundedNumber) {
    OwnMdevUuids own;
    const std::string first = mdev_uuid("p0", "t", 7);
    EXPECT_EQ(own.index_of("p0", "t", first), 7u);
    EXPECT_EQ(own.index_of("p0", "t", mdev_uuid("p0", "t", 8)), 8u);
    EXPECT_FALSE(own.index_of("p0", "t", "not-a-uuid"));
    EXPECT_EQ(own.pairs_made(), 1u);
    // Fill the table; p0 is asked again halfway, so p1 is the oldest when it overflows.
    for (size_t i = 1; i < OwnMdevUuids::kMaxPairs; ++i) {
        EXPECT_FALSE(own.index_of("p" + std::to_string(i), "t", first));
        if (i == OwnMdevUuids::kMaxPairs / 2) {
            EXPECT_EQ(own.index_of("p0", "t", first), 7u);
        }
    }
    EXPECT_EQ(own.pairs_kept(), OwnMdevUuids::kMaxPairs);
    EXPECT_EQ(own.index_of("extra", "t", mdev_uuid("extra", "t", 1)), 1u);
    EXPECT_EQ(own.pairs_kept(), OwnMdevUuids::kMaxPairs);
    const size_t made = own.pairs_made();
    EXPECT_EQ(own.index_of("p0", "t", first), 7u);  // kept: asked recently
    EXPECT_EQ(own.pairs_made(), made);
    EXPECT_EQ(own.index_of("p1", "t", mdev_uuid("p1", "t", 4095)), 4095u);  // made again
    EXPECT_EQ(own.pairs_made(), made + 1);
    EXPECT_EQ(own.pairs_kept(), OwnMdevUuids::kMaxPairs);
}

}  // namespace
}  // namespace vfiod
