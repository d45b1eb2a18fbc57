// Config loader: every class of bad input with its exact FILE:LINE:COLUMN, merging of
// vfiod.toml + conf.d, overlap warnings, and the shipped example config.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "config_test_helpers.hpp"
#include "fake_tree.hpp"
#include "io/config_loader.hpp"

namespace vfiod {
namespace {

using namespace vfiod::test;

// A document that must fail with exactly one error, at t.toml:AT, whose message contains `what`.
// Each section below lists its own: SECTION/BadConfig.GivesOneErrorAtItsPlace/NAME.
struct BadDoc {
    const char* name;
    std::string doc;
    const char* at;
    std::string what;
};

void PrintTo(const BadDoc& d, std::ostream* os) { *os << d.name; }

std::string case_name(const ::testing::TestParamInfo<BadDoc>& c) { return c.param.name; }

class BadConfig : public ::testing::TestWithParam<BadDoc> {};

TEST_P(BadConfig, GivesOneErrorAtItsPlace) {
    EXPECT_TRUE(OneError(GetParam().doc, GetParam().at, GetParam().what)) << GetParam().doc;
}

// ---- syntax -------------------------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(Syntax, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"MissingValue", "[daemon]\nmode = \n", "2:8", "TOML syntax error"},
    {"UnterminatedString", "[[device]]\nselector = \"10de:2331\n", "2:22", "TOML syntax error"},
    {"DuplicateKeyPointsAtTheSecondValue", "[daemon]\nmode = \"observe\"\nmode = \"enforce\"\n", "3:8",
     "TOML syntax error"},
}), case_name);

// ---- unknown keys and tables --------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(Unknown, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"KeyInDaemon", "[daemon]\nmode = \"observe\"\nverbose = true\n", "3:1",
     "unknown key \"verbose\" in [daemon]"},
    {"KeyInDevice", "[[device]]\nselector = \"10de:2331\"\nresource = \"a.com/b\"\n", "3:1",
     "unknown key \"resource\" in [[device]]"},
    {"KeyInProtect", "[[protect]]\naddress = \"0000:00:02.0\"\n  vendor = \"8086\"\n", "3:3",
     "unknown key \"vendor\" in [[protect]]"},
    {"TopLevelKey", "\nmode = \"observe\"\n", "2:1", "unknown key \"mode\"; expected [daemon]"},
    {"Table", "[daemon]\n\n[devices]\nselector = \"10de:2331\"\n", "3:1", "unknown table [devices]"},
    {"ArrayOfTables", "[[protects]]\naddress = \"0000:00:02.0\"\n", "1:1",
     "unknown table [[protects]]"},
    {"SubtableOfDevice", "[[device]]\nselector = \"10de:2331\"\n[device.extra]\nx = 1\n", "3:9",
     "unknown key \"extra\" in [[device]]"},
}), case_name);

TEST(ConfigUnknown, ControlCharactersInKeysAreEscaped) {
    auto r = parse_config("[daemon]\n\"a\\u001bb\" = 1\n", "t.toml");
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_NE(r.errors[0].find("\"a\\x1bb\""), std::string::npos) << r.errors[0];
    EXPECT_EQ(r.errors[0].find('\x1b'), std::string::npos);
}

// ---- shapes and types ---------------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(Shape, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"DeviceTableInsteadOfArrayOfTables", "[device]\nselector = \"10de:2331\"\n", "1:1",
     "device: expected an array of tables ([[device]]), got a table ([device])"},
    {"ProtectTableInsteadOfArrayOfTables", "[protect]\naddress = \"0000:00:02.0\"\n", "1:1",
     "protect: expected an array of tables ([[protect]])"},
    {"DeviceNotAnArray", "device = \"10de:2331\"\n", "1:10",
     "device: expected an array of tables ([[device]]), got a string"},
    {"ArrayElementNotATable", "device = [{ selector = \"10de:2331\" }, 7]\n", "1:39",
     "device: each entry must be a table ([[device]]), got an integer"},
    {"DaemonNotATable", "daemon = \"enforce\"\n", "1:10",
     "daemon: expected a table ([daemon]), got a string"},
}), case_name);

TEST(ConfigShape, InlineTablesAreTheSameAsHeaders) {
    auto c = Parsed("daemon = { mode = \"observe\" }\ndevice = [{ selector = \"10de:2331\" }]\n");
    EXPECT_EQ(c.mode, Mode::Observe);
    ASSERT_EQ(c.devices.size(), 1u);
    EXPECT_EQ(c.devices[0].selector->str(), "10de:2331");
}

INSTANTIATE_TEST_SUITE_P(Type, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"DaemonModeNotAString", "[daemon]\nmode = 1\n", "2:8",
     "daemon.mode: expected a string, got an integer"},
    {"DaemonWriteTimeoutAString", "[daemon]\nwrite_timeout = \"10\"\n", "2:17",
     "daemon.write_timeout: expected an integer, got a string"},
    {"DaemonWriteTimeoutAFloat", "[daemon]\nwrite_timeout = 10.0\n", "2:17",
     "daemon.write_timeout: expected an integer, got a floating-point number"},
    {"DaemonCompanionsABoolean", "[daemon]\ncompanions = true\n", "2:14",
     "daemon.companions: expected a string, got a boolean"},
    {"DaemonAllowBootVgaAString", "[daemon]\nallow_boot_vga = \"no\"\n", "2:18",
     "daemon.allow_boot_vga: expected a boolean, got a string"},
    {"DaemonAllowBootVgaAnInteger", "[daemon]\nallow_boot_vga = 1\n", "2:18",
     "daemon.allow_boot_vga: expected a boolean, got an integer"},
    {"DeviceSelectorAnInteger", device("selector", "0x10de"), "2:12",
     "device.selector: expected a string, got an integer"},
    {"DeviceAddressAnInteger", device("address", "1"), "2:11",
     "device.address: expected a string, got an integer"},
    {"DeviceResourceNameAnArray", "[[device]]\nselector = \"10de:2331\"\nresource_name = [\"a.com/b\"]\n",
     "3:17", "device.resource_name: expected a string, got an array"},
    {"DeviceDriverAnInteger", "[[device]]\nselector = \"10de:2331\"\ndriver = 1\n", "3:10",
     "device.driver: expected a string, got an integer"},
    {"DeviceEarlyAString", "[[device]]\nselector = \"10de:2331\"\nearly = \"yes\"\n", "3:9",
     "device.early: expected a boolean, got a string"},
    {"DeviceEarlyADate", "[[device]]\nselector = \"10de:2331\"\nearly = 1979-05-27\n", "3:9",
     "device.early: expected a boolean, got a date"},
    {"ProtectSelectorAnInteger", "[[protect]]\nselector = 8086\n", "2:12",
     "protect.selector: expected a string, got an integer"},
    {"ProtectAddressABoolean", "[[protect]]\naddress = true\n", "2:11",
     "protect.address: expected a string, got a boolean"},
}), case_name);

// ---- values -------------------------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(Value, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"ModeIsLowerCase", "[daemon]\nmode = \"Enforce\"\n", "2:8",
     "daemon.mode: unknown mode \"Enforce\"; expected \"enforce\" or \"observe\""},
    {"UnknownMode", "[daemon]\n  mode = \"dry-run\"\n", "2:10", "unknown mode \"dry-run\""},
    {"UnknownCompanionPolicy", "[daemon]\ncompanions = \"allow\"\n", "2:14",
     "daemon.companions: unknown policy \"allow\"; expected \"bind\" or \"refuse\""},
    {"WriteTimeoutZero", "[daemon]\nwrite_timeout = 0\n", "2:17",
     "daemon.write_timeout: 0 is out of range; expected 1..3600"},
    {"WriteTimeoutOverAnHour", "[daemon]\nwrite_timeout = 3601\n", "2:17", "3601 is out of range"},
    {"WriteTimeoutNegative", "[daemon]\nwrite_timeout = -5\n", "2:17", "-5 is out of range"},
    {"WriteTimeoutHuge", "[daemon]\nwrite_timeout = 9999999999999\n", "2:17", "out of range"},
    // An entry without a selector or an address: pointed at by its header.
    {"DeviceWithoutSelectorOrAddress", "[[device]]\nresource_name = \"a.com/b\"\n", "1:1",
     "[[device]] needs a selector or an address"},
    {"IndentedDeviceWithoutSelectorOrAddress",
     "[[device]]\nselector = \"10de:2331\"\n\n  [[device]]\n  early = true\n", "4:3",
     "[[device]] needs a selector or an address"},
    {"ProtectWithoutSelectorOrAddress", "[[protect]]\n", "1:1",
     "[[protect]] needs a selector or an address"},
    // One problem, one message: the selector is there, it is just wrong.
    {"BadSelectorDoesNotAlsoSayMissing", device("selector", "\"nope\""), "2:12", "invalid selector"},
}), case_name);

TEST(ConfigValue, BadSelectors) {
    for (const char* s : {"10de", "10de:2331:0", "10d:2331", "10de:23311", "xyzw:2331", "10de:",
                          ":2331", "*:2331", "10de:**", "", " 10de:2331", "10de:2331 ", "10de-2331",
                          "+10d:2331", "0x10:2331"}) {
        EXPECT_TRUE(OneError(device("selector", "\"" + std::string(s) + "\""), "2:12",
                             "device.selector: invalid selector \"" + std::string(s) + "\""))
            << s;
    }
    EXPECT_TRUE(OneError("[[protect]]\nselector = \"80 86:10d3\"\n", "2:12",
                         "protect.selector: invalid selector"));
}

TEST(ConfigValue, SelectorsAreCaseInsensitiveAndNormalised) {
    auto c = Parsed(device("selector", "\"10DE:23aB\"") + device("selector", "\"8086:*\""));
    ASSERT_EQ(c.devices.size(), 2u);
    EXPECT_EQ(c.devices[0].selector, (Selector{0x10de, 0x23ab}));
    EXPECT_EQ(c.devices[0].selector->str(), "10de:23ab");
    EXPECT_EQ(c.devices[1].selector, (Selector{0x8086, std::nullopt}));
    EXPECT_EQ(c.devices[1].selector->str(), "8086:*");
}

TEST(ConfigValue, BadAddresses) {
    for (const char* a : {"0000:0A:00.0",        // upper case
                          "0000:01:00.0/..",     // traversal
                          "../0000:01:00.0",     //
                          "0000:01:00.0/driver", // a path, not an address
                          "..",                  //
                          "0000:01:20.0",        // slot > 1f
                          "0000:01:00.8",        // function > 7
                          "0000:100:00.0",       // bus > ff
                          " 0000:01:00.0",       // spaces
                          "0000:01:00.0 ",       //
                          "0000:01: 00.0",       //
                          "0000:1:00.0",         // not canonical
                          "01:00.0",             // no domain
                          ""}) {
        EXPECT_TRUE(OneError(device("address", "\"" + std::string(a) + "\""), "2:11",
                             "device.address: invalid PCI address"))
            << a;
    }
    EXPECT_TRUE(OneError("[[protect]]\naddress = \"0000:00:02.0/../..\"\n", "2:11",
                         "protect.address: invalid PCI address"));
}

TEST(ConfigValue, AddressesParse) {
    auto c = Parsed(device("address", "\"0000:01:00.0\"") +
                    "[[protect]]\naddress = \"10000:e1:1f.7\"\n");
    ASSERT_EQ(c.devices.size(), 1u);
    EXPECT_EQ(c.devices[0].address, (PciAddress{0, 1, 0, 0}));
    EXPECT_FALSE(c.devices[0].selector);
    ASSERT_EQ(c.protects.size(), 1u);
    EXPECT_EQ(c.protects[0].address, (PciAddress{0x10000, 0xe1, 0x1f, 7}));
}

TEST(ConfigValue, WriteTimeoutBoundsAreAccepted) {
    EXPECT_EQ(Parsed("[daemon]\nwrite_timeout = 1\n").write_timeout, 1u);
    EXPECT_EQ(Parsed("[daemon]\nwrite_timeout = 3600\n").write_timeout, 3600u);
}

TEST(ConfigValue, BadResourceNames) {
    for (const char* n : {"nvidia.com", "/gpu", "nvidia.com/", "a/b/c", "nvidia.com/GPU X",
                          "nvidia.com/gpu\\n", "nvidia.com/gpu:1", "", "nvidia.com//gpu"}) {
        EXPECT_TRUE(OneError("[[device]]\nselector = \"10de:2331\"\nresource_name = \"" +
                                 std::string(n) + "\"\n",
                             "3:17", "device.resource_name: invalid resource name"))
            << n;
    }
}

// Names the kubelet refuses (Kubernetes extended resource names) fail at load time with the rule
// they break, not later in the device plugin's log.
TEST(ConfigValue, ResourceNamesFollowKubernetesRules) {
    auto doc = [](const std::string& n) {
        return "[[device]]\nselector = \"10de:2331\"\nresource_name = \"" + n + "\"\n";
    };
    const std::string name63(63, 'g'), domain244 = std::string(240, 'd') + ".com";
    for (const std::string& n : std::vector<std::string>{
             "nvidia.com/GH100_H100_PCIE", "intel.com/qat-4xxx", "x.y/z", "a-b.c9/Z.z_z-9",
             "c/" + name63.substr(1), "example.com/1"})
        EXPECT_EQ(Parsed(doc(n)).devices.at(0).resource_name, n);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"nvidia.com/" + name63 + "g", "the name after '/' has 64 characters; at most 63"},
        {"d" + domain244 + "/gpu", "the domain has 245 characters; at most 244"},
        {"NVIDIA.com/gpu", "the domain must be a DNS subdomain"},
        {"nv_idia.com/gpu", "the domain must be a DNS subdomain"},
        {"-nvidia.com/gpu", "the domain must be a DNS subdomain"},
        {"nvidia-.com/gpu", "the domain must be a DNS subdomain"},
        {"nvidia..com/gpu", "the domain must be a DNS subdomain"},
        {".nvidia.com/gpu", "the domain must be a DNS subdomain"},
        {"nvidia.com./gpu", "the domain must not end with '.'"},
        {"kubernetes.io/gpu", "reserved for Kubernetes"},
        {"gpu.kubernetes.io/gpu", "reserved for Kubernetes"},
        {"notkubernetes.io/gpu", "reserved for Kubernetes"},
        {"requests.nvidia.com/gpu", "names a quota"},
        {"nvidia.com/-gpu", "starting and ending with a letter or digit"},
        {"nvidia.com/gpu_", "starting and ending with a letter or digit"},
        {"nvidia.com/gp\\u00e9", "the name after '/' must be"},
        {"nvidia.com", "exactly one '/'"},
        {"/gpu", "must not be empty"},
    };
    for (const auto& [n, why] : bad)
        EXPECT_TRUE(OneError(doc(n), "3:17", "invalid resource name")) << n;
    for (const auto& [n, why] : bad)
        EXPECT_TRUE(OneError(doc(n), "3:17", why)) << n;
}

// Hostile input round 3: a valid name longer than the plugin's socket path can hold was accepted,
// and the plugin then failed at listen() with the real kubelet directory, forever. A name fits
// when /var/lib/kubelet/device-plugins/vfiod-<name>.sock is at most 107 bytes: 64 characters.
TEST(ConfigValue, ResourceNamesWhoseSocketPathWouldNotFitAreRefused) {
    auto doc = [](const std::string& n) {
        return "[[device]]\nselector = \"10de:2331\"\nresource_name = \"" + n + "\"\n";
    };
    const std::string name64 = "nvidia.com/" + std::string(53, 'g');
    ASSERT_EQ(name64.size(), 64u);
    EXPECT_EQ(Parsed(doc(name64)).devices.at(0).resource_name, name64);
    const std::string name65 = name64 + "g";
    EXPECT_TRUE(OneError(doc(name65), "3:17",
                         "cannot be served: its device plugin socket "
                         "/var/lib/kubelet/device-plugins/vfiod-nvidia_com_" +
                             std::string(54, 'g') +
                             ".sock would be 108 bytes long; a unix socket path holds at most "
                             "107 (resource names of up to 64 characters fit)"));
    // Valid for the kubelet, far too long for a socket.
    EXPECT_TRUE(OneError(doc(std::string(240, 'd') + ".com/gpu"), "3:17", "cannot be served"));
}

// Hostile input round 3: "example.com/gpu.a" and "example.com/gpu_a" both became the socket
// vfiod-example_com_gpu_a.sock, and the kubelet's gpu.a listed gpu_a's device; the environment
// variable folds case too. Such pairs are refused, naming both entries; one name in two entries
// is not a collision.
TEST(ConfigValue, ResourceNamesThatShareASocketOrAVariableAreRefused) {
    auto entry = [](const std::string& sel, const std::string& n) {
        return "[[device]]\nselector = \"" + sel + "\"\nresource_name = \"" + n + "\"\n";
    };
    EXPECT_TRUE(OneError(entry("10de:2331", "example.com/gpu.a") + entry("10de:2330", "example.com/gpu_a"),
                         "4:1",
                         "[[device]] resource_name \"example.com/gpu_a\" collides with "
                         "\"example.com/gpu.a\" of the entry at t.toml:1:1: both would be served "
                         "on the device plugin socket vfiod-example_com_gpu_a.sock; rename one"));
    EXPECT_TRUE(OneError(entry("10de:2331", "nvidia.com/gpu") + entry("10de:2330", "nvidia.com/GPU"),
                         "4:1",
                         "collides with \"nvidia.com/gpu\" of the entry at t.toml:1:1: both would "
                         "be handed to the VM in the environment variable PCI_RESOURCE_NVIDIA_COM_GPU"));
    // The same name twice, and names that differ after mapping, are fine.
    Config c = Parsed(entry("10de:2331", "nvidia.com/gpu") + entry("10de:2330", "nvidia.com/gpu") +
                      entry("8086:1533", "nvidia.com/gpu-a") + entry("8086:1534", "nvidia.com/gpu_b"));
    EXPECT_EQ(c.devices.size(), 4u);
}

// Across files: the error names the conf.d file's entry and the main file's.
TEST(ConfigValue, ACollisionAcrossFilesNamesBothFiles) {
    test::FakeTree t;
    const std::string etc = t.root() + "/etc/vfiod";
    t.write_file("etc/vfiod/vfiod.toml",
                 "[[device]]\nselector = \"10de:2331\"\nresource_name = \"a.com/x.y\"\n");
    t.write_file("etc/vfiod/conf.d/10-more.toml",
                 "\n[[device]]\nselector = \"8086:1533\"\nresource_name = \"a.com/x_y\"\n");
    auto r = load_config(t.root(), std::nullopt);
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], etc + "/conf.d/10-more.toml:2:1: [[device]] resource_name \"a.com/x_y\" "
                           "collides with \"a.com/x.y\" of the entry at " + etc +
                           "/vfiod.toml:1:1: both would be served on the device plugin socket "
                           "vfiod-a_com_x_y.sock; rename one of them");
}

// 20,000 entries colliding with the first make one error (one pair); 5,000 colliding pairs make
// 20 and a count. One lookup per entry either way.
TEST(ConfigValue, ManyCollidingNamesGiveBoundedErrors) {
    std::string doc = "[[device]]\nselector = \"10de:*\"\nresource_name = \"a.com/x\"\n";
    for (int i = 0; i < 20000; ++i)
        doc += "[[device]]\nselector = \"10de:*\"\nresource_name = \"a.com/X\"\n";
    auto r = parse_config(doc, "t.toml");
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);  // one pair, reported once
    std::string many = "[[device]]\nselector = \"10de:*\"\nresource_name = \"a.com/x0\"\n";
    for (int i = 0; i < 5000; ++i)
        many += "[[device]]\nselector = \"10de:*\"\nresource_name = \"a.com/x." + std::to_string(i) +
                "\"\n[[device]]\nselector = \"10de:*\"\nresource_name = \"a.com/x_" +
                std::to_string(i) + "\"\n";
    r = parse_config(many, "t.toml");
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 21u);
    EXPECT_EQ(r.errors[20], "... and 4980 more colliding resource names");
}

TEST(ConfigValue, GoodResourceNames) {
    auto c = Parsed(device("selector", "\"10de:2331\"") +
                    "resource_name = \"nvidia.com/GH100_H100_PCIE\"\n" +
                    device("selector", "\"8086:4940\"") + "resource_name = \"intel.com/qat-4xxx\"\n" +
                    device("selector", "\"1af4:1041\""));
    ASSERT_EQ(c.devices.size(), 3u);
    EXPECT_EQ(c.devices[0].resource_name, "nvidia.com/GH100_H100_PCIE");
    EXPECT_EQ(c.devices[1].resource_name, "intel.com/qat-4xxx");
    EXPECT_EQ(c.devices[2].resource_name, "");
}

TEST(ConfigValue, BadDrivers) {
    for (const char* d : {"nvidia", "VFIO-PCI", "vfio/../nvidia", "", "vfio pci", "nouveau",
                          "vfio-pci\\n", "Vfio"}) {
        EXPECT_TRUE(OneError("[[device]]\nselector = \"10de:2331\"\ndriver = \"" + std::string(d) +
                                 "\"\n",
                             "3:10", "is not a vfio driver"))
            << d;
    }
}

TEST(ConfigValue, DriverDefaultsAndVariants) {
    auto c = Parsed(device("selector", "\"10de:2331\"") + device("selector", "\"10de:2342\"") +
                    "driver = \"nvgrace_gpu_vfio_pci\"\nearly = true\n");
    ASSERT_EQ(c.devices.size(), 2u);
    EXPECT_EQ(c.devices[0].driver, "vfio-pci");
    EXPECT_FALSE(c.devices[0].early);
    EXPECT_EQ(c.devices[1].driver, "nvgrace_gpu_vfio_pci");
    EXPECT_TRUE(c.devices[1].early);
}

// ---- whole documents ----------------------------------------------------------------------

TEST(ConfigParse, EveryKeyAndOrigins) {
    auto c = Parsed("[daemon]\n"
                    "mode = \"observe\"\n"
                    "write_timeout = 30\n"
                    "companions = \"refuse\"\n"
                    "allow_boot_vga = true\n"
                    "\n"
                    "[[device]]\n"
                    "selector = \"10de:2331\"\n"
                    "address = \"0000:01:00.0\"\n"
                    "resource_name = \"nvidia.com/H100\"\n"
                    "driver = \"vfio-pci\"\n"
                    "early = true\n"
                    "\n"
                    "  [[protect]]\n"
                    "  selector = \"8086:10d3\"\n");
    EXPECT_EQ(c.mode, Mode::Observe);
    EXPECT_EQ(c.write_timeout, 30u);
    EXPECT_EQ(c.companions, CompanionPolicy::Refuse);
    EXPECT_TRUE(c.allow_boot_vga);
    ASSERT_EQ(c.devices.size(), 1u);
    const auto& d = c.devices[0];
    EXPECT_EQ(d.selector, (Selector{0x10de, 0x2331}));
    EXPECT_EQ(d.address, (PciAddress{0, 1, 0, 0}));
    EXPECT_EQ(d.resource_name, "nvidia.com/H100");
    EXPECT_TRUE(d.early);
    EXPECT_EQ(d.origin.str(), "t.toml:7:1");
    ASSERT_EQ(c.protects.size(), 1u);
    EXPECT_EQ(c.protects[0].selector, (Selector{0x8086, 0x10d3}));
    EXPECT_FALSE(c.protects[0].address);
    EXPECT_EQ(c.protects[0].origin.str(), "t.toml:14:3");
    EXPECT_EQ(c.files, std::vector<std::string>{"t.toml"});
}

TEST(ConfigParse, EmptyDocumentGivesDefaults) {
    auto c = Parsed("# nothing\n");
    EXPECT_EQ(c.mode, Mode::Enforce);
    EXPECT_EQ(c.write_timeout, 10u);
    EXPECT_EQ(c.companions, CompanionPolicy::Bind);
    EXPECT_FALSE(c.allow_boot_vga);
    EXPECT_TRUE(c.devices.empty());
    EXPECT_TRUE(c.protects.empty());
}

TEST(ConfigParse, AllErrorsAreReportedInDocumentOrder) {
    auto r = parse_config("[daemon]\n"
                          "write_timeout = 0\n"
                          "mode = \"x\"\n"
                          "[[device]]\n"
                          "selector = \"10de:2331\"\n"
                          "[[device]]\n"
                          "selector = \"bad\"\n"
                          "driver = \"nvidia\"\n"
                          "[[protect]]\n"
                          "colour = \"red\"\n",
                          "t.toml");
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 6u) << joined(r.errors);
    EXPECT_EQ(r.errors[0].substr(0, 12), "t.toml:2:17:");
    EXPECT_EQ(r.errors[1].substr(0, 11), "t.toml:3:8:");
    EXPECT_EQ(r.errors[2].substr(0, 12), "t.toml:7:12:");
    EXPECT_EQ(r.errors[3].substr(0, 12), "t.toml:8:10:");
    EXPECT_EQ(r.errors[4].substr(0, 11), "t.toml:9:1:");   // protect without selector/address
    EXPECT_EQ(r.errors[5].substr(0, 12), "t.toml:10:1:");  // unknown key
}

TEST(ConfigModel, StringsAndEquality) {
    EXPECT_STREQ(to_string(Mode::Enforce), "enforce");
    EXPECT_STREQ(to_string(Mode::Observe), "observe");
    EXPECT_STREQ(to_string(CompanionPolicy::Bind), "bind");
    EXPECT_STREQ(to_string(CompanionPolicy::Refuse), "refuse");
    EXPECT_EQ((Origin{"/etc/vfiod/vfiod.toml", 12, 1}).str(), "/etc/vfiod/vfiod.toml:12:1");
    std::string err;
    EXPECT_FALSE(Selector::parse("10de", &err));
    EXPECT_NE(err.find("vvvv:dddd"), std::string::npos) << err;

    // Moving an entry to another line is not a change; changing what it does is.
    auto a = Parsed(device("selector", "\"10de:2331\""));
    auto b = Parsed("\n\n" + device("selector", "\"10DE:2331\""));
    EXPECT_NE(a.devices[0].origin.line, b.devices[0].origin.line);
    EXPECT_TRUE(a == b);
    auto c = Parsed(device("selector", "\"10de:2331\"") + "early = true\n");
    EXPECT_FALSE(a == c);
    auto d = Parsed("[daemon]\nmode = \"observe\"\n" + device("selector", "\"10de:2331\""));
    EXPECT_FALSE(a == d);
}

// ---- overlaps -----------------------------------------------------------------------------

TEST(ConfigOverlap, WildcardAfterExactWarnsAtTheSecond) {
    auto w = Warnings(device("selector", "\"10de:2331\"") + device("selector", "\"10de:*\""));
    ASSERT_EQ(w.size(), 1u) << joined(w);
    EXPECT_EQ(w[0], "t.toml:3:1: [[device]] can match the same functions as the entry at "
                    "t.toml:1:1; the first (t.toml:1:1) wins");
}

TEST(ConfigOverlap, DisjointEntriesAreQuiet) {
    EXPECT_TRUE(Warnings(device("selector", "\"10de:2331\"") + device("selector", "\"10de:2330\""))
                    .empty());
    EXPECT_TRUE(Warnings(device("selector", "\"10de:*\"") + device("selector", "\"8086:*\"")).empty());
    EXPECT_TRUE(Warnings(device("address", "\"0000:01:00.0\"") + device("address", "\"0000:02:00.0\""))
                    .empty());
    // Same selector, different slots.
    EXPECT_TRUE(Warnings(device("selector", "\"10de:2331\"") + "address = \"0000:01:00.0\"\n" +
                         device("selector", "\"10de:2331\"") + "address = \"0000:02:00.0\"\n")
                    .empty());
}

TEST(ConfigOverlap, AddressOnlyOverlapsEntriesWithoutAddressOrTheSameOne) {
    auto w = Warnings(device("address", "\"0000:01:00.0\"") + device("selector", "\"8086:10d3\""));
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].substr(0, 11), "t.toml:3:1:");
    w = Warnings(device("address", "\"0000:01:00.0\"") + device("selector", "\"8086:10d3\"") +
                 "address = \"0000:01:00.0\"\n");
    EXPECT_EQ(w.size(), 1u);
    w = Warnings(device("selector", "\"10de:2331\"") + device("selector", "\"10de:2331\""));
    EXPECT_EQ(w.size(), 1u);
}

TEST(ConfigOverlap, EachEntryNamesTheFirstItOverlapsAndCountsTheRest) {
    auto w = Warnings(device("selector", "\"10de:2331\"") + device("selector", "\"10de:*\"") +
                      device("address", "\"0000:01:00.0\""));
    ASSERT_EQ(w.size(), 2u) << joined(w);
    EXPECT_EQ(w[0], "t.toml:3:1: [[device]] can match the same functions as the entry at "
                    "t.toml:1:1; the first (t.toml:1:1) wins");
    EXPECT_EQ(w[1], "t.toml:5:1: [[device]] can match the same functions as the entry at "
                    "t.toml:1:1 (and 1 more earlier entry); the first (t.toml:1:1) wins");
}

// Hostile input, issue 10 row 3: N copies of one wildcard entry gave one warning per pair
// (N=4000: 8 million lines, 25 s, 1.5 GB). Now one per entry, the first 20 kept, the rest counted.
TEST(ConfigOverlap, ManyCopiesOfOneEntryGiveBoundedWarningsInLinearTime) {
    std::string doc;
    for (int i = 0; i < 20000; ++i)
        doc += device("selector", "\"10de:*\"");
    auto w = Warnings(doc);
    ASSERT_EQ(w.size(), 21u);
    EXPECT_EQ(w[19], "t.toml:41:1: [[device]] can match the same functions as the entry at "
                     "t.toml:1:1 (and 19 more earlier entries); the first (t.toml:1:1) wins");
    EXPECT_EQ(w[20], "... and 19979 more overlapping [[device]] entries");
}

// The index behind the linear check must find exactly what comparing every pair finds.
TEST(ConfigOverlap, IndexAgreesWithPairwiseComparison) {
    const char* kinds[] = {
        "selector = \"10de:2331\"\n", "selector = \"10de:*\"\n", "selector = \"10de:2330\"\n",
        "selector = \"8086:*\"\n", "address = \"0000:01:00.0\"\n", "address = \"0000:02:00.0\"\n",
        "selector = \"10de:*\"\naddress = \"0000:01:00.0\"\n",
        "selector = \"10de:2331\"\naddress = \"0000:02:00.0\"\n",
    };
    const size_t n = std::size(kinds);
    // Every ordered pair (a, b): b warns about a exactly when they can share a function.
    auto overlap = [](size_t a, size_t b) {
        const bool expected[8][8] = {
            {1, 1, 0, 0, 1, 1, 1, 1}, {1, 1, 1, 0, 1, 1, 1, 1}, {0, 1, 1, 0, 1, 1, 1, 0},
            {0, 0, 0, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 0, 1, 0}, {1, 1, 1, 1, 0, 1, 0, 1},
            {1, 1, 1, 0, 1, 0, 1, 0}, {1, 1, 0, 0, 0, 1, 0, 1},
        };
        return expected[a][b];
    };
    for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b < n; ++b) {
            auto w = Warnings(std::string("[[device]]\n") + kinds[a] + "[[device]]\n" + kinds[b]);
            EXPECT_EQ(w.size(), overlap(a, b) ? 1u : 0u) << kinds[a] << "then " << kinds[b];
        }
}

TEST(ConfigOverlap, ProtectOverlappingADeviceIsQuiet) {
    EXPECT_TRUE(Warnings(device("selector", "\"10de:2331\"") + "[[protect]]\nselector = \"10de:*\"\n")
                    .empty());
}

// ---- hostile nesting (issue 10 row 2) -------------------------------------------------------

// toml++ recurses once per component of a dotted key; 40,000 overflowed the stack (SIGSEGV) in
// vfioctl and vfiod alike. Refused before toml++ sees the file, at the key's start.
TEST(ConfigNesting, DeeplyDottedKeysAreRefusedWithTheirPosition) {
    std::string deep = "a";
    for (int i = 1; i < 50000; ++i)
        deep += ".a";
    EXPECT_TRUE(OneError(deep + " = 1\n", "1:1", "key nested too deeply"));
    EXPECT_TRUE(OneError("[daemon]\n[" + deep + "]\n", "2:2", "key nested too deeply"));
    EXPECT_TRUE(OneError("\n\n  [[" + deep + "]]\n", "3:5", "key nested too deeply"));
    EXPECT_TRUE(OneError("x = { " + deep + " = 1 }\n", "1:7", "key nested too deeply"));
    std::string quoted = "\"a\"";
    for (int i = 1; i < 50000; ++i)
        quoted += " . 'a'";
    EXPECT_TRUE(OneError(quoted + " = 1\n", "1:1", "key nested too deeply"));
}

// Inline tables and arrays recurse in toml++ as well, and multiply with dotted keys: 250 nested
// inline tables, each keyed with 64 components (both under their own limits), needed 1-2 MB of
// stack and killed vfioctl under `ulimit -s 1024`. Refused at the bracket that goes too deep.
TEST(ConfigNesting, DeeplyNestedTablesAndArraysAreRefusedAtTheirBracket) {
    std::string key = "a";
    for (int i = 1; i < 64; ++i)
        key += ".a";
    std::string doc = "x = ";
    for (int i = 0; i < 250; ++i)
        doc += "{ " + key + " = ";
    doc += "1" + std::string(250, '}') + "\n";
    // The 17th brace: "x = " then 16 of "{ " + key + " = ".
    const size_t col = 5 + 16 * (key.size() + 5);
    EXPECT_TRUE(OneError(doc, "1:" + std::to_string(col),
                         "key nested too deeply: more than 16 levels of nested tables and arrays"));
    EXPECT_TRUE(OneError("x = " + std::string(50000, '[') + "\n", "1:21", "more than 16 levels"));
    // Sixteen levels are not refused for depth (the key is merely unknown), and brackets that
    // close again, or sit in strings and comments, do not add up.
    EXPECT_TRUE(OneError("x = " + std::string(16, '[') + std::string(16, ']') + "\n", "1:1",
                         "unknown key"));
    std::string many;
    for (int i = 0; i < 100; ++i)
        many += "[[protect]]\nselector = \"10de:*\" # [[[[[[[[[[[[[[[[[[\nresource_name = \"{{{{{{{{{{{{{{{{{\"\n";
    auto r = parse_config("[[device]]\nselector = \"8086:*\"\n" + many, "t.toml");
    EXPECT_TRUE(std::none_of(r.errors.begin(), r.errors.end(), [](const std::string& e) {
        return e.find("nested too deeply") != std::string::npos;
    })) << joined(r.errors);
}

TEST(ConfigNesting, DotsInStringsAndCommentsAreNotKeys) {
    std::string dots;
    for (int i = 0; i < 1000; ++i)
        dots += "a.";
    auto r = parse_config("# " + dots + "\n[[device]]\nselector = \"10de:*\" # " + dots +
                              "\nresource_name = \"x.y/z\"\n",
                          "t.toml");
    EXPECT_TRUE(r.config) << joined(r.errors);
    // Inside a string the dots are text; the key is the string's own (unknown) name.
    EXPECT_TRUE(OneError("\"" + dots + "\" = 1\n", "1:1", "unknown key"));
    EXPECT_TRUE(OneError("'''" + dots + "''' = 1\n", "1:1", "TOML syntax error"));
    // A multi-line basic string with an escaped quote and quotes before its delimiter.
    EXPECT_TRUE(OneError("x = \"\"\"\n\\\"" + dots + "\"\"\"\"\"\n", "1:1", "unknown key"));
    EXPECT_TRUE(OneError("x = '''" + dots + "'''''\n", "1:1", "unknown key"));
    EXPECT_TRUE(OneError("x = '" + dots + "'\n", "1:1", "unknown key"));
}

TEST(ConfigNesting, ADeepKeyInAConfDFileNamesThatFile) {
    test::FakeTree t;
    std::string deep = "a";
    for (int i = 1; i < 100; ++i)
        deep += ".a";
    t.write_file("etc/vfiod/vfiod.toml", "[[device]]\nselector = \"10de:*\"\n");
    t.write_file("etc/vfiod/conf.d/bad.toml", "\n" + deep + " = 1\n");
    auto r = load_config(t.root(), std::nullopt);
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], t.root() + "/etc/vfiod/conf.d/bad.toml:2:1: key nested too deeply: more "
                           "than 64 dotted components; refusing to parse the file");
}

// ---- files and merging --------------------------------------------------------------------

class ConfigFiles : public ::testing::Test {
protected:
    test::FakeTree tree;
    std::string at(const std::string& rel) const { return tree.root() + "/" + rel; }
    void put(const std::string& rel, const std::string& text) { tree.write_file(rel, text); }
    ConfigResult load(const std::optional<std::string>& file = std::nullopt) {
        return load_config(tree.root(), file);
    }
};

TEST_F(ConfigFiles, MissingDefaultMeansEmptyAllowlistWithOneWarning) {
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_TRUE(r.errors.empty());
    EXPECT_TRUE(r.config->devices.empty());
    EXPECT_TRUE(r.config->files.empty());
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0], at("etc/vfiod/vfiod.toml") + ": not found; the allowlist is empty");
}

TEST_F(ConfigFiles, MissingDefaultWithConfDReadsConfD) {
    put("etc/vfiod/conf.d/gpu.toml", device("selector", "\"10de:2331\""));
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_EQ(r.config->devices.size(), 1u);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0], at("etc/vfiod/vfiod.toml") + ": not found; using conf.d only");
}

TEST_F(ConfigFiles, ConfDIsMergedInLexicalOrder) {
    put("etc/vfiod/vfiod.toml", "[daemon]\nmode = \"observe\"\nwrite_timeout = 20\n" +
                                    device("selector", "\"1af4:1041\""));
    put("etc/vfiod/conf.d/20-b.toml", "[daemon]\ncompanions = \"refuse\"\nwrite_timeout = 40\n" +
                                          device("selector", "\"8086:10d3\""));
    put("etc/vfiod/conf.d/10-a.toml", "[daemon]\nwrite_timeout = 30\n" +
                                          device("selector", "\"10de:2331\"") +
                                          "[[protect]]\naddress = \"0000:00:02.0\"\n");
    put("etc/vfiod/conf.d/3-c.toml",
        "\n" + device("address", "\"0000:05:00.0\"") + "selector = \"1234:5678\"\n");
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
    const Config& c = *r.config;
    EXPECT_EQ(c.files, (std::vector<std::string>{at("etc/vfiod/vfiod.toml"),
                                                 at("etc/vfiod/conf.d/10-a.toml"),
                                                 at("etc/vfiod/conf.d/20-b.toml"),
                                                 at("etc/vfiod/conf.d/3-c.toml")}));
    EXPECT_EQ(c.mode, Mode::Observe);                  // set only in the main file
    EXPECT_EQ(c.write_timeout, 40u);                   // 20, then 30, then 40
    EXPECT_EQ(c.companions, CompanionPolicy::Refuse);  // set only in 20-b
    ASSERT_EQ(c.devices.size(), 4u);
    EXPECT_EQ(c.devices[0].selector->str(), "1af4:1041");
    EXPECT_EQ(c.devices[1].selector->str(), "10de:2331");
    EXPECT_EQ(c.devices[2].selector->str(), "8086:10d3");
    EXPECT_EQ(c.devices[3].address->str(), "0000:05:00.0");
    EXPECT_EQ(c.devices[0].origin.str(), at("etc/vfiod/vfiod.toml") + ":4:1");
    EXPECT_EQ(c.devices[1].origin.str(), at("etc/vfiod/conf.d/10-a.toml") + ":3:1");
    EXPECT_EQ(c.devices[3].origin.str(), at("etc/vfiod/conf.d/3-c.toml") + ":2:1");
    ASSERT_EQ(c.protects.size(), 1u);
    EXPECT_EQ(c.protects[0].origin.str(), at("etc/vfiod/conf.d/10-a.toml") + ":5:1");
}

TEST_F(ConfigFiles, OnlyTomlFilesInConfDAreRead) {
    put("etc/vfiod/vfiod.toml", "");
    put("etc/vfiod/conf.d/a.toml", device("selector", "\"10de:2331\""));
    for (const char* junk : {"README", "b.toml.bak", "c.toml~", ".d.toml", "e.toml.dpkg-old",
                             "f.TOML", "sub/g.toml"})
        put(std::string("etc/vfiod/conf.d/") + junk, "this is not = = toml");
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_EQ(r.config->files, (std::vector<std::string>{at("etc/vfiod/vfiod.toml"),
                                                         at("etc/vfiod/conf.d/a.toml")}));
    EXPECT_EQ(r.config->devices.size(), 1u);
}

TEST_F(ConfigFiles, ExplicitFileReplacesTheDefaultAndBringsItsConfD) {
    put("etc/vfiod/vfiod.toml", device("selector", "\"1111:1111\""));
    put("etc/vfiod/conf.d/a.toml", device("selector", "\"2222:2222\""));
    put("elsewhere/my.toml", "[daemon]\nmode = \"observe\"\n" + device("selector", "\"10de:2331\""));
    put("elsewhere/conf.d/x.toml", device("selector", "\"8086:10d3\""));
    auto r = load(at("elsewhere/my.toml"));
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
    EXPECT_EQ(r.config->files, (std::vector<std::string>{at("elsewhere/my.toml"),
                                                         at("elsewhere/conf.d/x.toml")}));
    ASSERT_EQ(r.config->devices.size(), 2u);
    EXPECT_EQ(r.config->devices[0].selector->str(), "10de:2331");
    EXPECT_EQ(r.config->devices[1].selector->str(), "8086:10d3");
    EXPECT_EQ(r.config->mode, Mode::Observe);
}

TEST_F(ConfigFiles, MissingExplicitFileIsAnError) {
    put("etc/vfiod/vfiod.toml", device("selector", "\"10de:2331\""));
    auto r = load(at("nope.toml"));
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("nope.toml") + ": cannot read: not found");
}

TEST_F(ConfigFiles, ExplicitDirectoryIsAnError) {
    auto r = load(at("sys"));
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("sys") + ": cannot read: not a regular file");
}

TEST_F(ConfigFiles, AnErrorInConfDMeansNoConfigAndAllErrorsAreListed) {
    put("etc/vfiod/vfiod.toml", "[daemon]\nmode = \"obsreve\"\n" + device("selector", "\"10de:2331\""));
    put("etc/vfiod/conf.d/10-ok.toml", device("selector", "\"8086:10d3\""));
    put("etc/vfiod/conf.d/20-bad.toml", "\n\n" + device("address", "\"0000:01:00.0/..\""));
    put("etc/vfiod/conf.d/30-syntax.toml", "[[device]\n");
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 3u) << joined(r.errors);
    EXPECT_EQ(r.errors[0].rfind(at("etc/vfiod/vfiod.toml") + ":2:8: daemon.mode: unknown mode", 0), 0u)
        << r.errors[0];
    EXPECT_EQ(r.errors[1].rfind(at("etc/vfiod/conf.d/20-bad.toml") + ":4:11: device.address:", 0), 0u)
        << r.errors[1];
    EXPECT_EQ(r.errors[2].rfind(at("etc/vfiod/conf.d/30-syntax.toml") + ":1:", 0), 0u) << r.errors[2];
    EXPECT_NE(r.errors[2].find("TOML syntax error"), std::string::npos);
}

TEST_F(ConfigFiles, UnreadableConfDFilesAreErrors) {
    put("etc/vfiod/vfiod.toml", "");
    tree.symlink("etc/vfiod/conf.d/dangling.toml", "/nonexistent/x.toml");
    put("etc/vfiod/conf.d/dir.toml/inner", "");
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 2u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("etc/vfiod/conf.d/dangling.toml") + ": cannot read: not found");
    EXPECT_EQ(r.errors[1], at("etc/vfiod/conf.d/dir.toml") + ": cannot read: not a regular file");
}

TEST_F(ConfigFiles, ConfDThatIsNotADirectoryIsAnError) {
    put("etc/vfiod/vfiod.toml", "");
    put("etc/vfiod/conf.d", "oops");
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("etc/vfiod/conf.d") + ": not a directory");
}

TEST_F(ConfigFiles, OversizedFileIsRefused) {
    put("etc/vfiod/vfiod.toml", std::string((1 << 20) + 1, '#'));
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("etc/vfiod/vfiod.toml") + ": larger than 1 MiB; refusing to read it");
    // Exactly 1 MiB of comment is still fine.
    put("etc/vfiod/vfiod.toml", std::string(1 << 20, '#'));
    EXPECT_TRUE(load().config);
}

// Under --root the files are read through the host access layer: a link in the tree resolves
// as if the tree were "/", so an absolute target names the tree's file, never the host's.
TEST_F(ConfigFiles, AConfDLinkToAnAbsolutePathStaysInsideTheRoot) {
    test::FakeTree outside;
    outside.write_file("x.toml", device("selector", "\"1111:1111\""));
    const std::string target = outside.root() + "/x.toml";
    put("etc/vfiod/vfiod.toml", "");
    tree.symlink("etc/vfiod/conf.d/x.toml", target);
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], at("etc/vfiod/conf.d/x.toml") + ": cannot read: not found");
    // The same absolute path inside the tree is the one read.
    put(target.substr(1), device("selector", "\"2222:2222\""));
    r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    ASSERT_EQ(r.config->devices.size(), 1u);
    EXPECT_EQ(r.config->devices[0].selector->str(), "2222:2222");
    EXPECT_EQ(r.config->devices[0].origin.str(), at("etc/vfiod/conf.d/x.toml") + ":1:1");
}

// A captured tree's own absolute links (vfiod.toml and conf.d kept elsewhere in it) work.
TEST_F(ConfigFiles, AbsoluteLinksInsideTheTreeAreFollowedFromTheRoot) {
    put("srv/vfiod/main.toml", device("selector", "\"10de:2331\""));
    put("srv/vfiod/more/a.toml", device("selector", "\"8086:10d3\""));
    tree.symlink("etc/vfiod/vfiod.toml", "/srv/vfiod/main.toml");
    tree.symlink("etc/vfiod/conf.d", "/srv/vfiod/more");
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_EQ(r.config->files, (std::vector<std::string>{at("etc/vfiod/vfiod.toml"),
                                                         at("etc/vfiod/conf.d/a.toml")}));
    EXPECT_EQ(r.config->devices.size(), 2u);
}

// --config FILE stays a plain path (DESIGN §2): the conf.d beside it follows links as the host
// does, wherever they lead.
TEST_F(ConfigFiles, AnExplicitFilesConfDLinksArePlainPaths) {
    test::FakeTree outside;
    outside.write_file("x.toml", device("selector", "\"1111:1111\""));
    put("elsewhere/my.toml", "");
    tree.symlink("elsewhere/conf.d/x.toml", outside.root() + "/x.toml");
    auto r = load(at("elsewhere/my.toml"));
    ASSERT_TRUE(r.config) << joined(r.errors);
    ASSERT_EQ(r.config->devices.size(), 1u);
    EXPECT_EQ(r.config->devices[0].selector->str(), "1111:1111");
}

// A FIFO would block open(2) until a writer came, and the daemon's start or reload with it: it
// is refused at once. Should the loader wait anyway, a writer is given so the test fails
// instead of hanging.
TEST_F(ConfigFiles, AFifoInConfDIsAnErrorNotAWait) {
    put("etc/vfiod/vfiod.toml", "");
    put("etc/vfiod/conf.d/10-ok.toml", device("selector", "\"8086:10d3\""));
    const std::string fifo = at("etc/vfiod/conf.d/20-fifo.toml");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto pending = std::async(std::launch::async, [this] { return load(); });
    if (pending.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        ADD_FAILURE() << "the loader waits on the FIFO";
        int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (w >= 0)
            ::close(w);
    }
    auto r = pending.get();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0], fifo + ": cannot read: not a regular file");
}

// The 1 MiB cap holds for conf.d files too, under the root and beside a --config FILE alike.
TEST_F(ConfigFiles, OversizedConfDFileIsRefusedByName) {
    put("etc/vfiod/vfiod.toml", "");
    put("etc/vfiod/conf.d/big.toml", std::string((1 << 20) + 1, '#'));
    auto r = load();
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0],
              at("etc/vfiod/conf.d/big.toml") + ": larger than 1 MiB; refusing to read it");
    put("elsewhere/my.toml", "");
    put("elsewhere/conf.d/big.toml", std::string((1 << 20) + 1, '#'));
    r = load(at("elsewhere/my.toml"));
    ASSERT_EQ(r.errors.size(), 1u) << joined(r.errors);
    EXPECT_EQ(r.errors[0],
              at("elsewhere/conf.d/big.toml") + ": larger than 1 MiB; refusing to read it");
}

// A file where etc/vfiod should be: nothing is under it, so the allowlist is empty, as on a
// host without the package's directory.
TEST_F(ConfigFiles, AFileInPlaceOfEtcVfiodMeansNoConfig) {
    put("etc/vfiod", "not a directory");
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0], at("etc/vfiod/vfiod.toml") + ": not found; the allowlist is empty");
}

TEST_F(ConfigFiles, OverlapAcrossFilesNamesBothFiles) {
    put("etc/vfiod/vfiod.toml", device("selector", "\"10de:*\""));
    put("etc/vfiod/conf.d/gpu.toml", "\n" + device("selector", "\"10de:2331\""));
    auto r = load();
    ASSERT_TRUE(r.config) << joined(r.errors);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0], at("etc/vfiod/conf.d/gpu.toml") +
                                 ":2:1: [[device]] can match the same functions as the entry at " +
                                 at("etc/vfiod/vfiod.toml") + ":1:1; the first (" +
                                 at("etc/vfiod/vfiod.toml") + ":1:1) wins");
}

TEST(ConfigShipped, ExampleLoadsCleanWithAnEmptyAllowlist) {
    const std::string path = std::string(VFIOD_SOURCE_DIR) + "/config/vfiod.toml";
    auto r = load_config("/nonexistent-root", path);
    ASSERT_TRUE(r.config) << joined(r.errors);
    EXPECT_TRUE(r.errors.empty());
    EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
    EXPECT_EQ(r.config->files, std::vector<std::string>{path});
    EXPECT_TRUE(r.config->devices.empty());
    EXPECT_TRUE(r.config->protects.empty());
    // The example spells out the defaults, so installing it changes nothing.
    EXPECT_TRUE(*r.config == Config{});
}

TEST(ConfigShipped, CommentedExamplesAreValidWhenUncommented) {
    // The examples in the shipped file must work when an admin removes the '# ' in front of them.
    const std::string path = std::string(VFIOD_SOURCE_DIR) + "/config/vfiod.toml";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::string text, line;
    while (std::getline(in, line)) {
        const auto eq = line.find(" = ");
        if (line == "# [[device]]" || line == "# [[protect]]" || line == "# [[sriov]]" ||
            line == "# [[mdev]]" ||
            (line.rfind("# ", 0) == 0 && line[2] != ' ' && eq != std::string::npos && eq < 20))
            line = line.substr(2);
        text += line + "\n";
    }
    auto c = Parsed(text);
    ASSERT_EQ(c.devices.size(), 1u) << text;
    EXPECT_EQ(c.devices[0].selector->str(), "10de:2331");
    EXPECT_EQ(c.devices[0].address->str(), "0000:01:00.0");
    ASSERT_EQ(c.protects.size(), 1u);
    EXPECT_EQ(c.protects[0].selector->str(), "8086:10d3");
    ASSERT_EQ(c.sriovs.size(), 1u);
    EXPECT_EQ(c.sriovs[0].selector->str(), "15b3:101d");
    EXPECT_EQ(c.sriovs[0].num_vfs, 8);
    ASSERT_EQ(c.mdevs.size(), 1u);
    EXPECT_EQ(c.mdevs[0].address->str(), "0000:3b:00.0");
    EXPECT_EQ(c.mdevs[0].type, "nvidia-222");
    EXPECT_EQ(c.mdevs[0].count, 4u);
    EXPECT_EQ(c.mdevs[0].resource_name, "nvidia.com/GRID_T4-1Q");
}

// ---- [[sriov]] (DESIGN §11) ---------------------------------------------------------------

std::string sriov(const std::string& lines) { return "[[sriov]]\n" + lines; }

TEST(ConfigSriov, EntriesParseWithTheirOriginsAndAppendAcrossTables) {
    auto c = Parsed(device("selector", "\"1b36:0010\"") +
                    sriov("selector = \"1b36:0010\"\nnum_vfs = 2\n") +
                    sriov("address = \"0000:3b:00.0\"\nselector = \"15B3:101d\"\nnum_vfs = 0\n") +
                    sriov("address = \"0000:3c:00.0\"\nnum_vfs = 65535\n"));
    ASSERT_EQ(c.sriovs.size(), 3u);
    EXPECT_EQ(c.devices.size(), 1u);
    EXPECT_EQ(c.sriovs[0].selector->str(), "1b36:0010");
    EXPECT_FALSE(c.sriovs[0].address);
    EXPECT_EQ(c.sriovs[0].num_vfs, 2);
    EXPECT_EQ(c.sriovs[0].origin.str(), "t.toml:3:1");
    EXPECT_EQ(c.sriovs[1].address->str(), "0000:3b:00.0");
    EXPECT_EQ(c.sriovs[1].selector->str(), "15b3:101d");  // normalised, as in [[device]]
    EXPECT_EQ(c.sriovs[1].num_vfs, 0);
    EXPECT_FALSE(c.sriovs[2].selector);
    EXPECT_EQ(c.sriovs[2].num_vfs, 65535);
    // Both given: both must match.
    PciAddress a = *PciAddress::parse("0000:3b:00.0");
    EXPECT_TRUE(c.sriovs[1].matches(a, 0x15b3, 0x101d));
    EXPECT_FALSE(c.sriovs[1].matches(a, 0x15b3, 0x101e));
    EXPECT_FALSE(c.sriovs[1].matches(*PciAddress::parse("0000:3b:00.1"), 0x15b3, 0x101d));
}

// num_vfs is required and a u16; selector and address are checked as in the other tables.
INSTANTIATE_TEST_SUITE_P(Sriov, BadConfig, ::testing::ValuesIn(std::vector<BadDoc>{
    {"UnknownKey", sriov("selector = \"15b3:101d\"\nnum_vfs = 8\nnumvfs = 8\n"), "4:1",
     "unknown key \"numvfs\" in [[sriov]]; expected selector, address or num_vfs"},
    {"TableInsteadOfArrayOfTables", "[sriov]\nselector = \"15b3:101d\"\nnum_vfs = 8\n", "1:1",
     "sriov: expected an array of tables ([[sriov]]), got a table ([sriov])"},
    {"UnknownArrayOfTables", "[[sriovs]]\nnum_vfs = 8\n", "1:1",
     "unknown table [[sriovs]]; expected [daemon], [[device]], [[protect]], [[sriov]] or "
     "[[mdev]]"},
    {"NeedsNumVfs", sriov("selector = \"15b3:101d\"\n"), "1:1", "[[sriov]] needs num_vfs"},
    {"NeedsASelectorOrAnAddress", sriov("num_vfs = 8\n"), "1:1",
     "[[sriov]] needs a selector or an address"},
    {"NumVfsNegative", sriov("selector = \"15b3:101d\"\nnum_vfs = -1\n"), "3:11",
     "sriov.num_vfs: -1 is out of range; expected 0..65535"},
    {"NumVfsOverU16", sriov("selector = \"15b3:101d\"\nnum_vfs = 65536\n"), "3:11",
     "sriov.num_vfs: 65536 is out of range; expected 0..65535"},
    {"NumVfsAString", sriov("selector = \"15b3:101d\"\nnum_vfs = \"8\"\n"), "3:11",
     "sriov.num_vfs: expected an integer, got a string"},
    {"NumVfsAFloat", sriov("selector = \"15b3:101d\"\nnum_vfs = 8.0\n"), "3:11",
     "sriov.num_vfs: expected an integer, got a floating-point number"},
    {"BadSelector", sriov("selector = \"15b3\"\nnum_vfs = 8\n"), "2:12",
     "sriov.selector: invalid selector \"15b3\""},
    {"BadAddress", sriov("address = \"0000:3B:00.0\"\nnum_vfs = 8\n"), "2:11", "sriov.address: "},
    {"AddressAnInteger", sriov("address = 3\nnum_vfs = 8\n"), "2:11",
     "sriov.address: expected a string, got an integer"},
}), case_name);

// A reload that changes num_vfs is a change (the PF's count is planned again); moving the entry
// to another line is not.
TEST(ConfigSriov, EqualityFollowsWhatTheEntriesDo) {
    auto a = Parsed(sriov("selector = \"15b3:101d\"\nnum_vfs = 8\n"));
    auto moved = Parsed("\n\n" + sriov("selector = \"15B3:101D\"\nnum_vfs = 8\n"));
    auto other = Parsed(sriov("selector = \"15b3:101d\"\nnum_vfs = 4\n"));
    EXPECT_TRUE(a == moved);
    EXPECT_FALSE(a == other);
    EXPECT_FALSE(a == Config{});
}

TEST(ConfigSriov, OverlappingEntriesWarnLikeDeviceEntries) {
    auto w = Warnings(sriov("selector = \"15b3:101d\"\nnum_vfs = 8\n") +
                      sriov("address = \"0000:3b:00.0\"\nnum_vfs = 4\n"));
    ASSERT_EQ(w.size(), 1u) << joined(w);
    EXPECT_EQ(w[0], "t.toml:4:1: [[sriov]] can match the same functions as the entry at "
                    "t.toml:1:1; the first (t.toml:1:1) wins");
    // A [[device]] entry for the same ID is no overlap: it allowlists the VFs.
    EXPECT_TRUE(Warnings(device("selector", "\"15b3:101d\"") +
                         sriov("selector = \"15b3:101d\"\nnum_vfs = 8\n"))
                    .empty());
}

}  // namespace
}  // namespace vfiod
