// Early binding from the initramfs (DESIGN §14): what an initramfs carries on a live host and
// in an image build, the list it reads, and the record plan and doctor judge against the
// configuration and the host as they are now.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/early.hpp"
#include "fake_tree.hpp"
#include "initramfs.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

namespace vfiod::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using vfiod::test::FakeTree;

PciAddress A(const char* s) { return *PciAddress::parse(s); }

Config parse(const std::string& toml) {
    ConfigResult r = parse_config(toml, "vfiod.toml");
    EXPECT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors.front());
    return r.config.value_or(Config{});
}

std::vector<std::string> addresses(const std::vector<EarlyFunction>& fns) {
    std::vector<std::string> out;
    for (const auto& f : fns)
        out.push_back(f.address.str() + " " + f.driver);
    return out;
}

// The bundled GPU host: the H100 and its audio function in group 13, the boot NVMe (root and
// /boot/efi mounted) in group 14, two I210s (one in bond0).
struct LiveHost : ::testing::Test {
    EarlySet early(const std::string& toml) {
        config = parse(toml);
        KernelHostFs fs(tree.root());
        Snapshot s = read_snapshot(fs);
        plan = make_plan(s.topology, s.use, config);
        return early_from_plan(config, plan);
    }
    FakeTree tree;
    bool built = (vfiod::test::build_gpu_host(tree), true);
    Config config;
    Plan plan;
};

TEST_F(LiveHost, CarriesTheWholeGroupOfAnEarlyEntry) {
    EarlySet s = early("[[device]]\nselector = \"10de:2331\"\nearly = true\n"
                       "[[device]]\nselector = \"8086:1533\"\n");  // not early: not carried
    EXPECT_TRUE(s.host_checked);
    // The audio function is no entry's, yet the daemon binds it all the same: it goes in too.
    EXPECT_THAT(addresses(s.carried), ElementsAre("0000:01:00.0 vfio-pci", "0000:01:00.1 vfio-pci"));
    EXPECT_EQ(s.carried[0].vendor, 0x10de);
    EXPECT_EQ(s.carried[0].device, 0x2331);
    EXPECT_EQ(s.carried[1].entry, "vfiod.toml:1:1");
    EXPECT_THAT(s.left_out, IsEmpty());
}

TEST_F(LiveHost, LeavesOutWhatTheHostUsesNamingTheFunctionAndWhy) {
    EarlySet s = early("[[device]]\nselector = \"144d:a808\"\nearly = true\n"
                       "[[device]]\nselector = \"8086:1533\"\nearly = true\n");
    // The boot NVMe (root mounted) and the bonded I210 stay; the free I210 goes in.
    EXPECT_THAT(addresses(s.carried), ElementsAre("0000:03:00.0 vfio-pci"));
    ASSERT_EQ(s.left_out.size(), 2u);
    EXPECT_EQ(s.left_out[0].address, A("0000:02:00.0"));
    EXPECT_THAT(s.left_out[0].why, HasSubstr("in-use-storage"));
    EXPECT_THAT(s.left_out[0].why, HasSubstr("is mounted on /"));
    EXPECT_EQ(s.left_out[1].address, A("0000:04:00.0"));
    EXPECT_THAT(s.left_out[1].why, HasSubstr("enslaved to bond0"));
}

// A group mate that holds a disk keeps the whole group out, the early function with it.
TEST_F(LiveHost, AGroupMateInUseKeepsTheEarlyFunctionOut) {
    tree.add_function(FakeTree::pci("0000:01:00.2", "10de", "22a4", "010802", "nvme", 13,
                                    "0000:00:01.0"));
    tree.add_block("0000:01:00.2", "nvme/nvme9", "nvme9n1", 259, 9);
    tree.write_file("sys/power/resume", "259:9\n");  // its only use: the hibernation image
    EarlySet s = early("[[device]]\nselector = \"10de:2331\"\nearly = true\n");
    EXPECT_THAT(s.carried, IsEmpty());
    ASSERT_EQ(s.left_out.size(), 1u);
    EXPECT_EQ(s.left_out[0].address, A("0000:01:00.0"));
    EXPECT_THAT(s.left_out[0].why, HasSubstr("is the resume device"));
}

TEST_F(LiveHost, ObserveModeAndAnEntryWithoutFunctionCarryNothing) {
    EarlySet s = early("[daemon]\nmode = \"observe\"\n"
                       "[[device]]\nselector = \"10de:2331\"\nearly = true\n");
    EXPECT_THAT(s.carried, IsEmpty());
    ASSERT_EQ(s.left_out.size(), 1u);
    EXPECT_THAT(s.left_out[0].why, HasSubstr("observe"));
    s = early("[[device]]\naddress = \"0000:09:00.0\"\nearly = true\n");
    EXPECT_THAT(s.carried, IsEmpty());
    ASSERT_EQ(s.left_out.size(), 1u);
    EXPECT_EQ(s.left_out[0].address, std::nullopt);
    EXPECT_THAT(s.left_out[0].why, HasSubstr("governs no PCI function"));
}

TEST(ImageBuild, CarriesOnlyEntriesWithAnAddressAndAnId) {
    Config c = parse("[[device]]\naddress = \"0000:01:00.0\"\nselector = \"10de:2331\"\n"
                     "driver = \"nvgrace-gpu-vfio-pci\"\nearly = true\n"
                     "[[device]]\nselector = \"8086:1533\"\nearly = true\n"      // ID alone
                     "[[device]]\naddress = \"0000:05:00.0\"\nearly = true\n"    // address alone
                     "[[device]]\naddress = \"0000:06:00.0\"\nselector = \"10de:*\"\n"
                     "early = true\n"                                            // wildcard
                     "[[device]]\naddress = \"0000:07:00.0\"\nselector = \"1b36:0010\"\n");
    EarlySet s = early_from_config(c);
    EXPECT_FALSE(s.host_checked);
    EXPECT_THAT(addresses(s.carried), ElementsAre("0000:01:00.0 nvgrace-gpu-vfio-pci"));
    ASSERT_EQ(s.left_out.size(), 3u);
    EXPECT_THAT(s.left_out[0].why, HasSubstr("no address"));
    EXPECT_THAT(s.left_out[1].why, HasSubstr("no vendor:device"));
    EXPECT_THAT(s.left_out[2].why, HasSubstr("no vendor:device"));
}

TEST(ImageBuild, TheListHoldsAddressIdAndDriverAndNothingElse) {
    Config c = parse("[[device]]\naddress = \"0000:01:00.0\"\nselector = \"10de:2331\"\n"
                     "early = true\n"
                     "[[device]]\naddress = \"0000:01:00.0\"\nselector = \"10de:2331\"\n"
                     "early = true\n");  // the same function twice: once in the list
    EarlySet s = early_from_config(c);
    EXPECT_EQ(early_list_text(s, "6.1.0-27-amd64"),
              "# vfiod early binding for 6.1.0-27-amd64: ADDRESS VENDOR DEVICE DRIVER "
              "(vfioctl initramfs)\n0000:01:00.0 10de 2331 vfio-pci\n");
    ASSERT_EQ(s.left_out.size(), 1u);
    EXPECT_THAT(s.left_out[0].why, HasSubstr("an earlier entry"));
}

TEST(EarlyDigest, ChangesWithWhatDecidesTheSetOnly) {
    const std::string base = "[[device]]\nselector = \"10de:2331\"\n";
    const std::string d = early_config_digest(parse(base + "early = true\n"));
    EXPECT_THAT(d, ::testing::StartsWith("fnv1a64:"));
    EXPECT_EQ(d.size(), 8u + 16u);
    EXPECT_EQ(d, early_config_digest(parse("# moved\n" + base + "early = true\n"
                                           "resource_name = \"nvidia.com/H100\"\n")));
    EXPECT_NE(d, early_config_digest(parse(base)));
    EXPECT_NE(d, early_config_digest(parse(base + "early = true\n[[protect]]\n"
                                                  "address = \"0000:01:00.0\"\n")));
    EXPECT_NE(d, early_config_digest(parse("[daemon]\nmode = \"observe\"\n" + base +
                                           "early = true\n")));
}

InitramfsRecord sample_record() {
    InitramfsRecord r;
    r.kernel = "6.1.0-27-amd64";
    r.built = "2026-12-05T22:50:00Z";
    r.config_digest = "fnv1a64:0123456789abcdef";
    r.config_files = {"/etc/vfiod/vfiod.toml"};
    r.set.host_checked = true;
    r.set.carried = {{A("0000:01:00.0"), 0x10de, 0x2331, "vfio-pci", "/etc/vfiod/vfiod.toml:3:1"}};
    r.set.left_out = {{A("0000:02:00.0"), "/etc/vfiod/vfiod.toml:7:1", "nvme0n1p2 is mounted on /"},
                      {std::nullopt, "/etc/vfiod/vfiod.toml:9:1", "governs no PCI function"}};
    return r;
}

TEST(InitramfsRecord, RoundTripsThroughItsJson) {
    InitramfsRecord r = sample_record();
    std::string err;
    auto back = parse_record(record_json(r), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->kernel, r.kernel);
    EXPECT_EQ(back->built, r.built);
    EXPECT_EQ(back->config_digest, r.config_digest);
    EXPECT_EQ(back->config_files, r.config_files);
    EXPECT_TRUE(back->set.host_checked);
    EXPECT_EQ(back->set.carried, r.set.carried);
    EXPECT_EQ(back->set.left_out, r.set.left_out);
    r.host_check_note = "a chroot: / is not PID 1's root";
    back = parse_record(record_json(r), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_FALSE(back->set.host_checked);
    EXPECT_EQ(back->host_check_note, r.host_check_note);
}

TEST(InitramfsRecord, AMalformedRecordSaysWhatIsWrong) {
    const std::string good = record_json(sample_record());
    auto broken = [&](const std::string& from, const std::string& to) {
        std::string text = good;
        size_t at = text.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        text.replace(at, from.size(), to);
        std::string err;
        EXPECT_FALSE(parse_record(text, &err)) << from;
        return err;
    };
    EXPECT_THAT(broken("\"kernel\": \"6.1.0-27-amd64\"", "\"kernel\": \"../../etc\""),
                HasSubstr("kernel"));
    EXPECT_THAT(broken("\"address\": \"0000:01:00.0\"", "\"address\": \"01:00\""),
                HasSubstr("not a PCI address"));
    EXPECT_THAT(broken("\"vendor\": \"10de\"", "\"vendor\": \"10dex\""), HasSubstr("vendor"));
    EXPECT_THAT(broken("\"carried\": [", "\"carried\": 5, \"x\": ["), HasSubstr("carried"));
    std::string err;
    EXPECT_FALSE(parse_record(good.substr(0, good.size() / 2), &err));
    EXPECT_FALSE(err.empty());
    EXPECT_FALSE(parse_record("[1, 2]", &err));
    EXPECT_FALSE(parse_record(std::string(100000, '['), &err));  // deep nesting: no crash
}

TEST(InitramfsRecord, KernelVersionsThatNameAFile) {
    for (const char* ok : {"6.1.0-27-amd64", "6.12.9+bpo-amd64", "5.10.0~rc1", "a_b"})
        EXPECT_TRUE(valid_kernel_version(ok)) << ok;
    for (const char* bad : {"", ".", "..", "6.1/../x", "6.1 x", "6.1\n"})
        EXPECT_FALSE(valid_kernel_version(bad)) << bad;
    EXPECT_FALSE(valid_kernel_version(std::string(129, 'a')));
}

TEST(InitramfsRecord, ReadsRecordsUnderTheRootAndWarnsOfOddOnes) {
    FakeTree tree;
    InitramfsRecord r = sample_record();
    tree.write_file("var/lib/vfiod/initramfs-6.1.0-27-amd64.json", record_json(r));
    tree.write_file("var/lib/vfiod/initramfs-6.1.0-28-amd64.json", record_json(r));  // renamed
    tree.write_file("var/lib/vfiod/initramfs-bad.json", "{\"kernel\": ");
    tree.write_file("var/lib/vfiod/journal.json", "not a record: not looked at");
    ASSERT_EQ(::mkfifo((tree.root() + "/var/lib/vfiod/initramfs-fifo.json").c_str(), 0644), 0);
    KernelHostFs fs(tree.root());
    std::vector<std::string> warnings;
    auto records = read_records(fs, &warnings);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].kernel, "6.1.0-27-amd64");
    EXPECT_THAT(warnings, ElementsAre(HasSubstr("initramfs-6.1.0-28-amd64.json: names kernel"),
                                      HasSubstr("initramfs-bad.json: not a vfiod initramfs"),
                                      HasSubstr("initramfs-fifo.json: cannot read: a FIFO")));
}

TEST(InitramfsRecord, OutOfDateWhenTheConfigOrWhatItWouldCarryChanged) {
    InitramfsRecord r = sample_record();
    EarlySet now;
    now.carried = r.set.carried;
    now.carried[0].entry = "/etc/vfiod/conf.d/10-gpu.toml:1:1";  // moved: the same function
    RecordCheck c = check_record(r, r.config_digest, now);
    EXPECT_FALSE(c.config_changed);
    EXPECT_FALSE(c.differs);
    EXPECT_EQ(c.advice, "");
    c = check_record(r, "fnv1a64:ffffffffffffffff", now);
    EXPECT_TRUE(c.config_changed);
    EXPECT_THAT(c.advice, HasSubstr("update-initramfs -u -k 6.1.0-27-amd64"));
    now.carried[0].driver = "nvgrace-gpu-vfio-pci";
    c = check_record(r, r.config_digest, now);
    EXPECT_TRUE(c.differs);
    EXPECT_THAT(c.advice, HasSubstr("dracut -f --kver 6.1.0-27-amd64"));
}

// plan and doctor: a line per record, and "out of date" with what to run.
TEST_F(LiveHost, TheSummaryComparesEachRecordWithARebuild) {
    const std::string toml = "[[device]]\nselector = \"10de:2331\"\nearly = true\n";
    EarlySet s = early(toml);
    InitramfsRecord r = sample_record();
    r.set = s;
    r.config_digest = early_config_digest(config);
    tree.write_file("var/lib/vfiod/initramfs-6.1.0-27-amd64.json", record_json(r));
    KernelHostFs fs(tree.root());
    std::vector<std::string> warnings;
    InitramfsSummary sum = summarize_initramfs(fs, config, plan, &warnings);
    EXPECT_TRUE(sum.shown);
    EXPECT_TRUE(sum.ok);
    EXPECT_THAT(sum.lines, ElementsAre(HasSubstr("carries 0000:01:00.0 0000:01:00.1")));
    // The H100 is early no more: the image still overrides it at boot.
    early("[[device]]\nselector = \"10de:2331\"\n");
    sum = summarize_initramfs(fs, config, plan, &warnings);
    EXPECT_FALSE(sum.ok);
    ASSERT_EQ(sum.lines.size(), 2u);
    EXPECT_THAT(sum.lines[1], HasSubstr("configuration changed"));
    EXPECT_THAT(sum.lines[1], HasSubstr("would now carry none"));
    EXPECT_THAT(warnings, IsEmpty());
    // No early entry and a record that carries nothing (every image the hook builds has one):
    // nothing to say, whatever the digest.
    r.set.carried.clear();
    tree.write_file("var/lib/vfiod/initramfs-6.1.0-27-amd64.json", record_json(r));
    EXPECT_FALSE(summarize_initramfs(fs, config, plan, &warnings).shown);
    // No record and no early entry: nothing to say.
    tree.remove("var/lib/vfiod");
    EXPECT_FALSE(summarize_initramfs(fs, config, plan, &warnings).shown);
}

TEST(ImageBuildReason, ATreeIsReadAsTheHostItCaptures) {
    EXPECT_EQ(image_build_reason("/some/tree"), "");
}

}  // namespace
}  // namespace vfiod::cli
