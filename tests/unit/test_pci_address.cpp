#include <gtest/gtest.h>

#include "core/pci_address.hpp"

using vfiod::PciAddress;

TEST(PciAddress, ParsesCanonicalForms) {
    auto a = PciAddress::parse("0000:01:00.1");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->domain, 0u);
    EXPECT_EQ(a->bus, 1);
    EXPECT_EQ(a->slot, 0);
    EXPECT_EQ(a->function, 1);
    EXPECT_EQ(a->str(), "0000:01:00.1");
    EXPECT_EQ(a->object_path_element(), "0000_01_00_1");

    auto top = PciAddress::parse("ffff:ff:1f.7");
    ASSERT_TRUE(top);
    EXPECT_EQ(top->str(), "ffff:ff:1f.7");
}

TEST(PciAddress, AcceptsVmdDomainsAboveFfff) {
    auto a = PciAddress::parse("10000:e1:00.0");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->domain, 0x10000u);
    EXPECT_EQ(a->str(), "10000:e1:00.0");
}

TEST(PciAddress, RejectsEverythingThatDoesNotRoundTrip) {
    const char* bad[] = {
        "",              "0000:01:00",       "0000:01:00.8",   "0000:01:20.0",
        "0000:100:00.0", "0000:01:00.0 ",    " 0000:01:00.0",  "0000:01:00.0\n",
        "0000:0A:00.0",  "0000:01:00.a",     "000:01:00.0",    "00000:01:00.0",
        "0000:1:00.0",   "0000:01:0.0",      "../../../etc",   "0000:01:00.0/..",
        "0000:01:00.0/../../x", "0000:01/00.0", "0000:01:00.-1", "0000:+1:00.0",
        "0x00:01:00.0",  "0000:01:00.0.0",   "123456789:01:00.0", "0000::00.0",
    };
    for (const char* s : bad) {
        std::string err;
        EXPECT_FALSE(PciAddress::parse(s, &err)) << s;
        EXPECT_NE(err.find("invalid PCI address"), std::string::npos) << s;
    }
}

TEST(PciAddress, ErrorEscapesControlCharacters) {
    std::string err;
    EXPECT_FALSE(PciAddress::parse(std::string_view("0000:01\n:00.0\x1b[2J", 17), &err));
    EXPECT_EQ(err.find('\n'), std::string::npos);
    EXPECT_EQ(err.find('\x1b'), std::string::npos);
    EXPECT_NE(err.find("\\x0a"), std::string::npos);
}

TEST(PciAddress, OrdersByDomainBusSlotFunction) {
    auto a = *PciAddress::parse("0000:01:00.1");
    auto b = *PciAddress::parse("0000:01:01.0");
    auto c = *PciAddress::parse("0001:00:00.0");
    EXPECT_LT(a, b);
    EXPECT_LT(b, c);
}
