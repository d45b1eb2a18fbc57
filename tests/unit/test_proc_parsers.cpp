#include "io/proc_parsers.hpp"

#include <gtest/gtest.h>

#include <climits>

using namespace vfiod;

TEST(ParseMountinfo, ReadsDeviceNumbersMountPointAndSource) {
    auto m = parse_mountinfo(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "27 1 259:2 / / rw,relatime shared:1 master:2 - ext4 /dev/root rw\n");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0].major, 0u);
    EXPECT_EQ(m[0].minor, 21u);
    EXPECT_EQ(m[0].mount_point, "/proc");
    EXPECT_EQ(m[0].source, "proc");
    // Optional fields before the "-" separator must not shift the source.
    EXPECT_EQ(m[1].major, 259u);
    EXPECT_EQ(m[1].minor, 2u);
    EXPECT_EQ(m[1].mount_point, "/");
    EXPECT_EQ(m[1].source, "/dev/root");
}

TEST(ParseMountinfo, UndoesOctalEscapes) {
    auto m = parse_mountinfo("30 27 8:1 / /mnt/my\\040disk\\134x rw - ext4 /dev/sd\\011a1 rw");
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].mount_point, "/mnt/my disk\\x");
    EXPECT_EQ(m[0].source, "/dev/sd\ta1");
}

TEST(ParseMountinfo, SkipsMalformedLinesAndKeepsGoodOnes) {
    auto m = parse_mountinfo(
        "garbage\n"
        "1 2 x:y / /a rw - ext4 /dev/a rw\n"
        "1 2 8 / /b rw - ext4 /dev/b rw\n"
        "1 2 99999999999:1 / /c rw - ext4 /dev/c rw\n"
        "\n"
        "1 2 8:3 / /d rw\n"  // truncated: no separator, still has its device numbers
        "1 2 8:4 / /e rw - ext4 /dev/e rw");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0].mount_point, "/d");
    EXPECT_EQ(m[0].source, "");
    EXPECT_EQ(m[1].minor, 4u);
    EXPECT_EQ(m[1].source, "/dev/e");
    EXPECT_TRUE(parse_mountinfo("").empty());
}

TEST(ParseMountinfo, TrailingBackslashIsKeptLiterally) {
    auto m = parse_mountinfo("1 2 8:1 / /a\\04 rw - ext4 /dev/x\\ rw");
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].mount_point, "/a\\04");
    EXPECT_EQ(m[0].source, "/dev/x\\");
}

TEST(ParseMounts, ReadsSourceAndMountPoint) {
    auto m = parse_mounts(
        "/dev/root / ext4 rw,relatime 0 0\n"
        "rpool/ROOT/debian /srv zfs rw 0 0\n"
        "/dev/sdb1 /media/a\\040b vfat rw 0 0\n"
        "lonely\n");
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0].source, "/dev/root");
    EXPECT_EQ(m[0].mount_point, "/");
    EXPECT_EQ(m[1].source, "rpool/ROOT/debian");
    EXPECT_EQ(m[2].mount_point, "/media/a b");
    EXPECT_TRUE(parse_mounts("").empty());
}

TEST(ParseSwaps, SkipsHeaderAndReadsFilenames) {
    auto s = parse_swaps(
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
        "/dev/sda2                               partition\t8388604\t\t0\t\t-2\n"
        "/swap\\040file                          file\t\t1048572\t\t0\t\t-3\n");
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0], "/dev/sda2");
    EXPECT_EQ(s[1], "/swap file");
    EXPECT_TRUE(parse_swaps("Filename\tType\tSize\tUsed\tPriority\n").empty());
    EXPECT_TRUE(parse_swaps("").empty());
}

TEST(ParseRoute, OnlyInterfacesWithAnUpRoute) {
    auto r = parse_route_ifaces(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "eth1\t000200C0\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "bond0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "eth2\t0000A8C0\t00000000\tZZZZ\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "eth3\n");
    EXPECT_EQ(r, (std::set<std::string>{"bond0", "eth0"}));
    EXPECT_TRUE(parse_route_ifaces("").empty());
}

TEST(ParseIpv6Route, IgnoresLinkLocalMulticastAndLoopback) {
    const char* z = "00000000000000000000000000000000";
    auto line = [&](const std::string& dest, const std::string& plen, const std::string& ifc) {
        return dest + " " + plen + " " + z + " 00 " + z + " 00000100 00000001 00000000 00000001 " +
               ifc + "\n";
    };
    auto r = parse_ipv6_route_ifaces(
        line("fe800000000000000000000000000000", "40", "eth0") +
        line("febf0000000000000000000000000001", "80", "eth0") +  // still fe80::/10
        line("ff000000000000000000000000000000", "08", "eth0") +
        line("fd000000000000000000000000000000", "40", "eth1") +
        line("00000000000000000000000000000000", "00", "eth2") +  // default route
        line("fec00000000000000000000000000000", "40", "eth3") +  // just outside fe80::/10
        line("00000000000000000000000000000001", "80", "lo") +
        line("zz000000000000000000000000000000", "40", "eth4") +
        line("fd00", "40", "eth5") + "short line eth6\n");
    EXPECT_EQ(r, (std::set<std::string>{"eth1", "eth2", "eth3"}));
    EXPECT_TRUE(parse_ipv6_route_ifaces("").empty());
}

TEST(ParseHexAttr, Strict) {
    EXPECT_EQ(parse_hex_attr("0x10de", 4), 0x10deu);
    EXPECT_EQ(parse_hex_attr("0x030200", 6), 0x030200u);
    EXPECT_EQ(parse_hex_attr("0xFFFF", 4), 0xffffu);
    EXPECT_EQ(parse_hex_attr("0xffffffff", 99), 0xffffffffu);  // capped at 8 digits
    EXPECT_FALSE(parse_hex_attr("0x10de0", 4));                // too long
    EXPECT_FALSE(parse_hex_attr("10de", 4));                   // no prefix
    EXPECT_FALSE(parse_hex_attr("0x", 4));
    EXPECT_FALSE(parse_hex_attr("", 4));
    EXPECT_FALSE(parse_hex_attr("0x10dg", 4));
    EXPECT_FALSE(parse_hex_attr(" 0x10de", 4));
    EXPECT_FALSE(parse_hex_attr("0x10de\n", 4));
    EXPECT_FALSE(parse_hex_attr("0x1ffffffff", 9));
}

TEST(ParseIntAttr, Strict) {
    EXPECT_EQ(parse_int_attr("-1"), -1);
    EXPECT_EQ(parse_int_attr("3"), 3);
    EXPECT_EQ(parse_int_attr("0"), 0);
    EXPECT_EQ(parse_int_attr(std::to_string(LONG_MAX)), LONG_MAX);
    EXPECT_EQ(parse_int_attr(std::to_string(LONG_MIN)), LONG_MIN);
    EXPECT_FALSE(parse_int_attr("9223372036854775808"));
    EXPECT_FALSE(parse_int_attr("-9223372036854775809"));
    EXPECT_FALSE(parse_int_attr(""));
    EXPECT_FALSE(parse_int_attr("-"));
    EXPECT_FALSE(parse_int_attr("+3"));
    EXPECT_FALSE(parse_int_attr("3 "));
    EXPECT_FALSE(parse_int_attr("0x3"));
}

// Arbitrary bytes (NULs, lone backslashes, huge lines) must neither crash nor hang any parser.
TEST(ProcParsers, SurviveArbitraryBytes) {
    std::string junk;
    for (int i = 0; i < 4096; ++i)
        junk += static_cast<char>((i * 131 + 7) % 256);
    junk += std::string(100000, '\\');
    for (std::string_view in : {std::string_view(junk), std::string_view("\\"),
                                std::string_view("\n\n\n"), std::string_view("-\n- - -")}) {
        parse_mountinfo(in);
        parse_mounts(in);
        parse_swaps(in);
        parse_route_ifaces(in);
        parse_ipv6_route_ifaces(in);
        EXPECT_FALSE(parse_hex_attr(in, 8).has_value());
        EXPECT_FALSE(parse_int_attr(in).has_value());
    }
}

TEST(LineValue, UeventUdevDatabaseAndNvidiaInformation) {
    EXPECT_EQ(line_value("MAJOR=116\nMINOR=2\nDEVNAME=snd/controlC0\n", "DEVNAME="), "snd/controlC0");
    EXPECT_EQ(line_value("S:disk/by-id/x\nE:ID_FS_TYPE=zfs_member\nE:ID_FS_UUID=1\n",
                         "E:ID_FS_TYPE="),
              "zfs_member");
    EXPECT_EQ(line_value("Model: \t\t NVIDIA H100\nIRQ:   77\nDevice Minor: \t 3\n",
                         "Device Minor:"),
              "3");
    // Only whole keys at the start of a line; the first line wins; a value may be empty.
    EXPECT_EQ(line_value("XDEVNAME=a\nDEVNAME=b\nDEVNAME=c", "DEVNAME="), "b");
    EXPECT_EQ(line_value("E:ID_FS_TYPE=\n", "E:ID_FS_TYPE="), "");
    EXPECT_EQ(line_value("MAJOR=1\n", "DEVNAME="), std::nullopt);
    EXPECT_EQ(line_value("", "DEVNAME="), std::nullopt);
}

TEST(CharMajor, OnlyFromTheCharacterSection) {
    const char* devices =
        "Character devices:\n  1 mem\n116 alsa\n195 nvidia-frontend\n\n"
        "Block devices:\n  8 sd\n195 nvidia\n259 blkext\n";
    EXPECT_EQ(char_major(devices, "nvidia-frontend"), 195u);
    EXPECT_EQ(char_major(devices, "alsa"), 116u);
    EXPECT_EQ(char_major(devices, "nvidia"), std::nullopt);  // a block driver of that name
    EXPECT_EQ(char_major(devices, "sd"), std::nullopt);
    EXPECT_EQ(char_major("195 nvidia\n", "nvidia"), std::nullopt);  // no section header
}

TEST(ParseDevnum, MajorMinorWithinTwentyBits) {
    EXPECT_EQ(parse_devnum("259:2"), std::make_pair(259u, 2u));
    EXPECT_EQ(parse_devnum("1048575:0"), std::make_pair(1048575u, 0u));
    EXPECT_EQ(parse_devnum("1048576:0"), std::nullopt);
    EXPECT_EQ(parse_devnum("8"), std::nullopt);
    EXPECT_EQ(parse_devnum("-1:2"), std::nullopt);
    EXPECT_EQ(parse_devnum("a:b"), std::nullopt);
}
