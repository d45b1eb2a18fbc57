// vfioctl: argument parsing and verb dispatch. Each verb lives in its own cmd_*.cpp.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"

using namespace vfiod::cli;

namespace {

enum Opt : unsigned {
    kRoot = 1,
    kConfig = 2,
    kJson = 4,
    kOffline = 8,
    kYaml = 16,
    kExternal = 32,
    kJsonPatch = 64,
};

struct Verb {
    const char* name;
    int (*run)(const Args&);
    unsigned opts;        // which options it takes
    const char* operand;  // name of the required operand, or nullptr
    const char* summary;
};

const Verb kVerbs[] = {
    {"plan", run_plan, kRoot | kConfig | kJson, nullptr,
     "show what vfiod would do to each IOMMU group, and why (writes nothing)"},
    {"apply", run_apply, kRoot | kConfig | kJson, nullptr,
     "execute the plan once without the daemon (root); exit 0 only if every group ended bound"},
    {"check-config", run_check_config, kJson, "FILE", "validate a configuration file"},
    {"status", run_status, kRoot | kConfig | kJson | kOffline, nullptr,
     "the daemon's inventory over D-Bus (--offline: read the host instead)"},
    {"bind", run_bind, 0, "ADDR", "ask the daemon to bind ADDR's whole IOMMU group"},
    {"release", run_release, 0, "ADDR", "ask the daemon to give ADDR's group back to the host"},
    {"doctor", run_doctor, kRoot | kConfig | kJson, nullptr,
     "explain, per allowlisted device, whether it is ready and what KubeVirt will count"},
    {"kubevirt", run_kubevirt, kRoot | kConfig | kJson | kYaml | kExternal | kJsonPatch, nullptr,
     "print the KubeVirt CR fragment (permitted pciHostDevices, HostDevices gate) for the "
     "allowlist"},
};

const char kHelp[] = R"(Usage: vfioctl [OPTIONS] COMMAND [ARGS]

Prepare PCI devices for pass-through: vfioctl shows and explains what the vfiod daemon does,
which is to bind whole IOMMU groups of allowlisted devices to vfio-pci through driver_override,
never a partial group and never a device the host is using.

Commands:
  plan                 Dry run: one decision per IOMMU group that holds an allowlisted device
                       (bind, bound or refuse with a reason) and the exact sysfs writes.
                       Reads the host (or --root tree) and the configuration; writes nothing.
  apply                Execute the plan once, without the daemon (root only; refused while
                       vfiod runs, which would race it). Prints each group's outcome;
                       exit 0 only if every bind/bound group ended bound.
  doctor               Explain, per allowlisted device, whether it is ready for pass-through,
                       what blocks it and how to fix that, and what KubeVirt will count.
                       Exit 0 when everything is ready, 1 when something is not.
  check-config FILE    Validate FILE (and the conf.d/ directory beside it): every error as
                       FILE:LINE:COLUMN: message, and warnings such as overlapping entries.
  status               The daemon's inventory over D-Bus: each group's state (bound, pending,
                       refused, failed, released) and members. --offline reads the host
                       instead of asking the daemon.
  bind ADDR            Ask the daemon to bind the whole IOMMU group of function ADDR
                       (e.g. 0000:01:00.0). ADDR must be allowlisted and not protected.
  release ADDR         Ask the daemon to give ADDR's group back to its original host
                       drivers. Refused (in-use-vfio) while a VM holds the group.
  kubevirt             The KubeVirt CR fragment for the allowlist: permittedHostDevices.
                       pciHostDevices (pciVendorSelector "VVVV:DDDD", resourceName) and the
                       HostDevices feature gate, as YAML (default) or --json; --external adds
                       externalResourceProvider: true (vfiod-device-plugin serves them);
                       --json-patch prints RFC 6902 add operations for kubectl patch (type
                       json) that keep the cluster's other entries. Wildcard selectors are
                       expanded to the pairs present on the host (--root applies). Exit 1 when
                       no entry has a resource_name.

Who may do what: everyone may read (status, and plan/doctor on what they can read). bind,
release and the daemon's Reload need root, or the polkit action org.vfiod1.manage, which an
administrator grants to a Unix group with a rules file: copy
/usr/share/doc/vfiod/examples/50-vfiod.rules to /etc/polkit-1/rules.d/ and name the group.
vfiod never prompts for a password; without polkitd only root may.

Options:
  --root DIR           Resolve every path under DIR instead of / (sys/, proc/, dev/, run/,
                       etc/vfiod/): inspect a captured or synthetic host tree.
  --config FILE        Read FILE (and FILE's sibling conf.d/*.toml) instead of
                       DIR/etc/vfiod/vfiod.toml and DIR/etc/vfiod/conf.d/*.toml.
  --json               Machine-readable output for scripts (plan, apply, status, doctor,
                       check-config).
  --offline            status: read sysfs under --root instead of asking the daemon.
  --yaml               kubevirt: YAML output (the default).
  --external           kubevirt: mark the resources externalResourceProvider: true.
  --json-patch         kubevirt: RFC 6902 add operations instead of a fragment.
  -h, --help           Show this help, or a command's help: vfioctl COMMAND --help.
  --version            Show the version.

Exit status:
  0  success (plan: the plan was computed, whatever it decided)
  1  the operation failed or was refused
  2  bad arguments or a bad configuration (nothing was done)
  3  the vfiod daemon is not reachable on the system bus
  4  permission denied (not root, and polkit does not grant org.vfiod1.manage)

Examples:
  vfioctl plan                          what vfiod would do on this host
  vfioctl plan --json | jq '.groups[] | select(.action=="refuse")'
  vfioctl plan --root /tmp/captured-host --config ./vfiod.toml
  vfioctl check-config /etc/vfiod/vfiod.toml
  vfioctl doctor                        why KubeVirt counts 0 devices
  vfioctl status --json                 the daemon's view, for device plugins
  vfioctl release 0000:01:00.0          give a GPU back to the host

Files:
  /etc/vfiod/vfiod.toml, /etc/vfiod/conf.d/*.toml   configuration
  /run/vfiod/                                       the daemon's journal of bindings
)";

void print_verb_help(const Verb& v) {
    std::printf("Usage: vfioctl %s%s%s", v.name, v.operand ? " " : "", v.operand ? v.operand : "");
    if (v.opts & kRoot)
        std::printf(" [--root DIR]");
    if (v.opts & kConfig)
        std::printf(" [--config FILE]");
    if (v.opts & kOffline)
        std::printf(" [--offline]");
    if (v.opts & kExternal)
        std::printf(" [--external]");
    if (v.opts & kJson)
        std::printf(" [--json]");
    if (v.opts & kYaml)
        std::printf(" [--yaml]");
    if (v.opts & kJsonPatch)
        std::printf(" [--json-patch]");
    std::printf("\n\n%s.\n\nSee vfioctl --help for the options and exit codes.\n", v.summary);
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "vfioctl: %s\nTry 'vfioctl --help'.\n", message.c_str());
    return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string_view> argl(argv + 1, argv + argc);
    Args args;
    const Verb* verb = nullptr;
    bool help = false;
    std::vector<std::string> operands;
    unsigned seen = 0;

    for (size_t i = 0; i < argl.size(); ++i) {
        std::string_view a = argl[i];
        std::string value;
        auto take_value = [&](std::string_view name) -> bool {
            if (a.size() > name.size() && a[name.size()] == '=') {
                value = std::string(a.substr(name.size() + 1));
                return true;
            }
            if (i + 1 >= argl.size())
                return false;
            value = std::string(argl[++i]);
            return true;
        };
        auto is = [&](std::string_view name) {
            return a == name || (a.substr(0, name.size()) == name && a.size() > name.size() &&
                                 a[name.size()] == '=');
        };
        if (a == "-h" || a == "--help") {
            help = true;
        } else if (a == "--version") {
            std::printf("vfioctl %s\n", VFIOD_VERSION);
            return kExitOk;
        } else if (a == "--json") {
            args.json = true;
            seen |= kJson;
        } else if (a == "--offline") {
            args.offline = true;
            seen |= kOffline;
        } else if (a == "--yaml") {
            args.yaml = true;
            seen |= kYaml;
        } else if (a == "--external") {
            args.external = true;
            seen |= kExternal;
        } else if (a == "--json-patch") {
            args.json_patch = true;
            seen |= kJsonPatch;
        } else if (is("--root")) {
            if (!take_value("--root") || value.empty())
                return usage_error("--root needs a directory");
            args.root = value;
            seen |= kRoot;
        } else if (is("--config")) {
            if (!take_value("--config") || value.empty())
                return usage_error("--config needs a file");
            args.config = value;
            seen |= kConfig;
        } else if (a == "--") {
            for (++i; i < argl.size(); ++i)
                operands.emplace_back(argl[i]);
        } else if (a.size() > 1 && a[0] == '-') {
            return usage_error("unknown option '" + std::string(a) + "'");
        } else if (!verb) {
            for (const Verb& v : kVerbs)
                if (a == v.name)
                    verb = &v;
            if (!verb)
                return usage_error("unknown command '" + std::string(a) + "'");
        } else {
            operands.emplace_back(a);
        }
    }

    if (!verb) {
        if (help) {
            std::fputs(kHelp, stdout);
            return kExitOk;
        }
        return usage_error("no command given");
    }
    if (help) {
        print_verb_help(*verb);
        return kExitOk;
    }
    static const std::pair<unsigned, const char*> kNames[] = {
        {kRoot, "--root"},       {kConfig, "--config"},     {kJson, "--json"},
        {kOffline, "--offline"}, {kYaml, "--yaml"},         {kExternal, "--external"},
        {kJsonPatch, "--json-patch"}};
    for (auto [bit, name] : kNames)
        if ((seen & bit) && !(verb->opts & bit))
            return usage_error(std::string(name) + " does not apply to '" + verb->name + "'");
    if (verb->operand) {
        if (operands.size() != 1)
            return usage_error(std::string("'") + verb->name + "' takes exactly one " + verb->operand);
        args.operand = operands[0];
    } else if (!operands.empty()) {
        return usage_error("unexpected argument '" + operands[0] + "'");
    }
    if (__builtin_popcount(seen & (kJson | kYaml | kJsonPatch)) > 1)
        return usage_error("--json, --yaml and --json-patch exclude each other");
    if (seen & kRoot) {
        struct stat st;
        if (stat(args.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            return usage_error("--root " + args.root + ": not a directory");
    }
    return verb->run(args);
}
