// vfioctl doctor --kubevirt-cr (cli/kubevirt_cr, cli/doctor's kubevirt check; DESIGN §12): what
// a KubeVirt CR says about virt-handler's mdev handling, read from YAML or JSON as kubectl prints
// it, every bad input refused with the file and line, and whether the CR would let virt-handler
// remove vfiod's mdevs (KubeVirt v1.9: it keeps a type it configures or an external
// mediatedDevices entry names, spaces as '_', and removes every other mdev unless its mdev
// handling is off).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "doctor.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "kubevirt_cr.hpp"
#include "mdev_test_host.hpp"

namespace vfiod::cli {
namespace {

// What `kubectl get kubevirt -n kubevirt -o yaml` prints: a List of one KubeVirt.
const char kListYaml[] = R"(apiVersion: v1
items:
- apiVersion: kubevirt.io/v1
  kind: KubeVirt
  metadata:
    name: kubevirt
    namespace: kubevirt
  spec:
    configuration:
      developerConfiguration:
        featureGates:
        - HostDevices
        - DisableMDEVConfiguration
      mediatedDevicesConfiguration:
        mediatedDeviceTypes:
        - nvidia-222
        mediatedDevicesTypes:
        - nvidia-11
        nodeMediatedDeviceTypes:
        - nodeSelector:
            kubernetes.io/hostname: node1
          mediatedDeviceTypes:
          - GRID T4-2Q
      permittedHostDevices:
        mediatedDevices:
        - mdevNameSelector: Single port serial
          resourceName: vfiod.io/mtty-1
          externalResourceProvider: true
        - mdevNameSelector: GRID T4-8Q
          resourceName: nvidia.com/GRID_T4-8Q
  status:
    phase: Deployed
kind: List
metadata:
  resourceVersion: ""
)";

// The same object as `kubectl get kubevirt kubevirt -n kubevirt -o json` prints it.
const char kObjectJson[] = R"({
    "apiVersion": "kubevirt.io/v1",
    "kind": "KubeVirt",
    "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
    "spec": {
        "configuration": {
            "developerConfiguration": {"featureGates": ["HostDevices", "DisableMDEVConfiguration"]},
            "mediatedDevicesConfiguration": {
                "mediatedDeviceTypes": ["nvidia-222"],
                "mediatedDevicesTypes": ["nvidia-11"],
                "nodeMediatedDeviceTypes": [{"nodeSelector": {"kubernetes.io/hostname": "node1"},
                                             "mediatedDeviceTypes": ["GRID T4-2Q"]}]
            },
            "permittedHostDevices": {"mediatedDevices": [
                {"mdevNameSelector": "Single port serial", "resourceName": "vfiod.io/mtty-1",
                 "externalResourceProvider": true},
                {"mdevNameSelector": "GRID T4-8Q", "resourceName": "nvidia.com/GRID_T4-8Q"}]}
        }
    }
}
)";

KubevirtMdevConfig parsed(const std::string& text) {
    std::string error;
    auto c = parse_kubevirt_cr(text, "cr.yaml", &error);
    EXPECT_TRUE(c) << error;
    return c.value_or(KubevirtMdevConfig{});
}

// The error of text that must be refused.
std::string refusal(const std::string& text) {
    std::string error;
    EXPECT_FALSE(parse_kubevirt_cr(text, "cr.yaml", &error)) << text;
    return error;
}

TEST(KubevirtCr, AListAsKubectlPrintsItGivesTheTypesKeptAndTheGate) {
    KubevirtMdevConfig c = parsed(kListYaml);
    EXPECT_EQ(c.configured, (std::set<std::string>{"nvidia-222", "nvidia-11", "GRID_T4-2Q"}));
    // Only an external entry keeps its type: virt-handler serves the other itself.
    EXPECT_EQ(c.external, (std::set<std::string>{"Single_port_serial"}));
    EXPECT_TRUE(c.node_types);
    EXPECT_TRUE(c.gate);
    EXPECT_FALSE(c.enabled);
    EXPECT_TRUE(c.handling_off());
}

TEST(KubevirtCr, JsonReadsAsTheSameYaml) {
    KubevirtMdevConfig y = parsed(kListYaml), j = parsed(kObjectJson);
    EXPECT_EQ(j.configured, y.configured);
    EXPECT_EQ(j.external, y.external);
    EXPECT_EQ(j.gate, y.gate);
    EXPECT_EQ(j.node_types, y.node_types);
}

TEST(KubevirtCr, EnabledWinsOverTheGateEitherWay) {
    const std::string head = "kind: KubeVirt\nspec:\n  configuration:\n";
    KubevirtMdevConfig off = parsed(head + "    mediatedDevicesConfiguration: {enabled: false}\n");
    EXPECT_EQ(off.enabled, false);
    EXPECT_TRUE(off.handling_off());
    KubevirtMdevConfig on = parsed(head +
                                   "    mediatedDevicesConfiguration: {enabled: true}\n"
                                   "    developerConfiguration:\n"
                                   "      featureGates: [DisableMDEVConfiguration]\n");
    EXPECT_TRUE(on.gate);
    EXPECT_FALSE(on.handling_off());
    // Nothing said: handling is on, and nothing is kept.
    KubevirtMdevConfig bare = parsed("kind: KubeVirt\nspec: {}\n");
    EXPECT_FALSE(bare.handling_off());
    EXPECT_TRUE(bare.configured.empty() && bare.external.empty());
    // Null fields, as a hand-written CR may have them, are absent ones.
    KubevirtMdevConfig nulls = parsed(head + "    mediatedDevicesConfiguration: null\n"
                                             "    permittedHostDevices: {mediatedDevices: ~}\n");
    EXPECT_FALSE(nulls.handling_off());
}

// kubevirt-cr-example.yaml holds the CR and a VMI: the KubeVirt object is the one read.
TEST(KubevirtCr, OtherDocumentsBesideTheCrAreSkipped) {
    KubevirtMdevConfig c = parsed(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nspec: {domain: {}}\n---\n" +
        std::string(kListYaml));
    EXPECT_TRUE(c.gate);
}

TEST(KubevirtCr, TypeNamesAreComparedAsVirtHandlerDoes) {
    EXPECT_EQ(kubevirt_type_key("GRID T4-1Q"), "GRID_T4-1Q");
    EXPECT_EQ(kubevirt_type_key("GRID T4-1Q\n"), "GRID_T4-1Q");
    // Spaces first, then trimming: a space is never trimmed away, as in virt-handler.
    EXPECT_EQ(kubevirt_type_key(" GRID\t\n"), "_GRID");
    EXPECT_EQ(kubevirt_type_key("\n"), "");
}

TEST(KubevirtCr, BadInputIsRefusedWithTheFileAndLine) {
    EXPECT_EQ(refusal("kind: KubeVirt\nspec:\n  configuration: [\n").rfind("cr.yaml:4:", 0), 0u);
    EXPECT_NE(refusal("kind: KubeVirt\nspec: {\n").find("not valid YAML or JSON"),
              std::string::npos);
    EXPECT_NE(refusal("apiVersion: v1\nkind: ConfigMap\n").find("no KubeVirt object"),
              std::string::npos);
    EXPECT_NE(refusal("").find("no KubeVirt object"), std::string::npos);
    EXPECT_EQ(refusal("kind: KubeVirt\nspec: {}\n---\nkind: KubeVirt\nspec: {}\n"),
              "cr.yaml:4:1: a second KubeVirt object; give the file one (kubectl get kubevirt "
              "NAME -n NAMESPACE -o yaml)");
    EXPECT_EQ(refusal("apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kv}\n"),
              "cr.yaml:1:1: the KubeVirt object has no spec");
    EXPECT_EQ(refusal("kind: KubeVirt\nspec: [1]\n"),
              "cr.yaml:2:7: spec: expected an object, found a list");
    EXPECT_EQ(refusal("kind: KubeVirt\nspec:\n  configuration:\n    developerConfiguration:\n"
                      "      featureGates: HostDevices\n"),
              "cr.yaml:5:21: spec.configuration.developerConfiguration.featureGates: expected a "
              "list, found a scalar");
    EXPECT_EQ(refusal("kind: KubeVirt\nspec:\n  configuration:\n"
                      "    mediatedDevicesConfiguration: {enabled: maybe}\n"),
              "cr.yaml:4:45: spec.configuration.mediatedDevicesConfiguration.enabled: expected "
              "true or false");
    EXPECT_EQ(refusal("kind: KubeVirt\nspec:\n  configuration:\n    permittedHostDevices:\n"
                      "      mediatedDevices: [GRID T4-1Q]\n"),
              "cr.yaml:5:25: spec.configuration.permittedHostDevices.mediatedDevices[0]: "
              "expected an object");
    EXPECT_EQ(refusal("kind: KubeVirt\nspec:\n  configuration:\n"
                      "    mediatedDevicesConfiguration: {mediatedDeviceTypes: [[a]]}\n"),
              "cr.yaml:4:58: spec.configuration.mediatedDevicesConfiguration."
              "mediatedDeviceTypes[0]: expected a string");
    // Nesting deep enough to exhaust a recursive parser's stack is an error, not a crash.
    EXPECT_NE(refusal("kind: KubeVirt\nspec: " + std::string(100000, '[')).find("cr.yaml:"),
              std::string::npos);
}

// Aliases of aliases (a "billion laughs" document: 9^10 strings if expanded) are read as the
// shared nodes they are: refused at the first element of the wrong type, at once.
TEST(KubevirtCr, AnAliasBombIsRefusedWithoutExpandingIt) {
    std::string text = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
    for (int i = 1; i < 10; ++i) {
        std::string list = "*a" + std::to_string(i - 1);
        text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + list;
        for (int k = 1; k < 9; ++k)
            text += ", " + list;
        text += "]\n";
    }
    text = "apiVersion: kubevirt.io/v1\nkind: KubeVirt\n" + text +
           "spec:\n  configuration:\n    mediatedDevicesConfiguration:\n"
           "      mediatedDeviceTypes: *a9\n";
    EXPECT_NE(refusal(text).find("mediatedDeviceTypes[0]: expected a string"), std::string::npos);
}

struct KubevirtCrFile : ::testing::Test {
    std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                ("kvcr-" + std::to_string(::getpid()));
    KubevirtCrFile() { std::filesystem::create_directories(dir); }
    ~KubevirtCrFile() override { std::filesystem::remove_all(dir); }
    std::string write(const char* name, const std::string& text) {
        std::ofstream(dir / name, std::ios::binary) << text;
        return (dir / name).string();
    }
};

TEST_F(KubevirtCrFile, TheFileIsBoundedAndMustBeARegularFile) {
    std::string error;
    EXPECT_FALSE(read_kubevirt_cr((dir / "none.yaml").string(), &error));
    EXPECT_EQ(error, (dir / "none.yaml").string() + ": no such file");
    EXPECT_FALSE(read_kubevirt_cr(dir.string(), &error));
    EXPECT_EQ(error, dir.string() + ": cannot read: not a regular file");
    // Exactly the bound reads; one byte more is refused before it is parsed.
    std::string cr = "kind: KubeVirt\nspec: {}\n#";
    std::string at_bound = cr + std::string(kMaxKubevirtCrBytes - cr.size() - 1, 'x') + "\n";
    ASSERT_EQ(at_bound.size(), kMaxKubevirtCrBytes);
    EXPECT_TRUE(read_kubevirt_cr(write("at.yaml", at_bound), &error)) << error;
    const std::string over = write("over.yaml", at_bound + "\n");
    EXPECT_FALSE(read_kubevirt_cr(over, &error));
    EXPECT_EQ(error, over + ": larger than 4 MiB; refusing to read it");
}

// The check against the pairs of a host with the mtty sample parent, whose type mtty-1 is named
// "Single port serial".
struct KubevirtCrCheck : ::testing::Test, vfiod::test::FakeMdevHost {
    KubevirtCrCheck() { kernel->register_mdev_parent(vfiod::test::mtty_parent()); }
    Check check(const std::string& cr_yaml,
                const char* toml = "[[mdev]]\nparent = \"mtty\"\ntype = \"mtty-1\"\ncount = 2\n") {
        ConfigResult cr = parse_config(toml, "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        Config config = cr.config.value_or(Config{});
        Snapshot s = read_snapshot(*kernel);
        Plan plan = make_plan(s.topology, s.use, config);
        plan.mdevs = plan_mdevs(s.mdevs, s.topology, s.use, config);
        return kubevirt_cr_check(parsed("kind: KubeVirt\nspec:\n" + cr_yaml),
                                 mdev_findings(s.mdevs, s.topology, config, plan));
    }
    static bool has(const Check& c, const char* part) {
        return c.detail.find(part) != std::string::npos;
    }
};

// An empty configuration deletes vfiod's mdevs: the check fails and names the type.
TEST_F(KubevirtCrCheck, AnEmptyConfigurationFailsNamingTheType) {
    Check c = check("  configuration: {}\n");
    EXPECT_EQ(c.name, "kubevirt");
    EXPECT_FALSE(c.ok);
    EXPECT_TRUE(has(c, "would remove vfiod's mdevs of type mtty-1 (\"Single port serial\")"))
        << c.detail;
    EXPECT_TRUE(has(c, "DisableMDEVConfiguration")) << c.detail;
}

TEST_F(KubevirtCrCheck, AnExternalEntryKeepsTheTypeByNameAndNotesTheGate) {
    for (const char* sel : {"Single port serial", "Single_port_serial", "mtty-1"}) {
        Check c = check(std::string("  configuration:\n    permittedHostDevices:\n"
                                    "      mediatedDevices:\n        - mdevNameSelector: ") +
                        sel + "\n          resourceName: x.io/y\n"
                              "          externalResourceProvider: true\n");
        EXPECT_TRUE(c.ok) << sel << ": " << c.detail;
        EXPECT_TRUE(has(c, "note: its mdev handling is on: add the DisableMDEVConfiguration"))
            << c.detail;
    }
    // Without externalResourceProvider virt-handler serves the type itself and keeps nothing.
    Check c = check("  configuration:\n    permittedHostDevices:\n      mediatedDevices:\n"
                    "        - {mdevNameSelector: Single port serial, resourceName: x.io/y}\n");
    EXPECT_FALSE(c.ok) << c.detail;
}

TEST_F(KubevirtCrCheck, AConfiguredTypeIsKeptButVirtHandlerWouldCreateItsOwn) {
    Check c = check("  configuration:\n    mediatedDevicesConfiguration:\n"
                    "      nodeMediatedDeviceTypes:\n        - nodeSelector: {a: b}\n"
                    "          mediatedDeviceTypes: [Single port serial]\n");
    EXPECT_TRUE(c.ok) << c.detail;
    EXPECT_TRUE(has(c, "virt-handler also creates mdevs of it")) << c.detail;
    EXPECT_TRUE(has(c, "every nodeMediatedDeviceTypes entry counted")) << c.detail;
}

TEST_F(KubevirtCrCheck, HandlingOffPassesAndEnabledTrueOverridesTheGate) {
    Check gate = check("  configuration:\n    developerConfiguration:\n"
                       "      featureGates: [DisableMDEVConfiguration]\n");
    EXPECT_TRUE(gate.ok) << gate.detail;
    EXPECT_TRUE(has(gate, "handling is off (DisableMDEVConfiguration gate)")) << gate.detail;
    Check field = check("  configuration:\n    mediatedDevicesConfiguration: {enabled: false}\n");
    EXPECT_TRUE(field.ok) << field.detail;
    EXPECT_TRUE(has(field, "mediatedDevicesConfiguration.enabled: false")) << field.detail;
    Check overridden = check("  configuration:\n    developerConfiguration:\n"
                             "      featureGates: [DisableMDEVConfiguration]\n"
                             "    mediatedDevicesConfiguration: {enabled: true}\n");
    EXPECT_FALSE(overridden.ok) << overridden.detail;
    EXPECT_TRUE(has(overridden, "gate is ignored")) << overridden.detail;
}

// A parent this host lacks has no name file to read: its type's directory is what virt-handler
// compares with, as a fallback, and what vfioctl kubevirt prints.
TEST_F(KubevirtCrCheck, AnAbsentParentsTypeIsMatchedByItsDirectory) {
    const char* toml = "[[mdev]]\nparent = \"mbochs\"\ntype = \"mbochs-small\"\ncount = 1\n";
    EXPECT_FALSE(check("  configuration: {}\n", toml).ok);
    Check c = check("  configuration:\n    permittedHostDevices:\n      mediatedDevices:\n"
                    "        - {mdevNameSelector: mbochs-small, resourceName: a.io/b, "
                    "externalResourceProvider: true}\n",
                    toml);
    EXPECT_TRUE(c.ok) << c.detail;
}

TEST_F(KubevirtCrCheck, WithoutMdevEntriesThereIsNothingToRemove) {
    Check c = check("  configuration: {}\n", "[[device]]\nselector = \"10de:1eb8\"\n");
    EXPECT_TRUE(c.ok);
    EXPECT_TRUE(has(c, "no [[mdev]] entries")) << c.detail;
}

}  // namespace
}  // namespace vfiod::cli
