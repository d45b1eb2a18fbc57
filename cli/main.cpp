// vfioctl: argument parsing and verb dispatch. Each verb lives in its own cmd_*.cpp. Each option
// is spelled once, in kOptions: parsing, the usage lines, the Options section of --help (which
// the bash completion reads) and the checks of which verb takes what all come from that table.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <optional>
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
    kKubevirtCr = 128,
    kKernel = 256,
    kOutput = 512,
    kImage = 1024,
};

// Where an option sits in a verb's usage line: values first, then what changes the verb's
// behaviour, then the output format. Formats also exclude each other.
enum class Kind { Value, Modifier, Format };

struct Option {
    const char* name;   // "--root"; a value option also takes "--root=DIR"
    Opt bit;            // how a verb (Verb::opts) names the options it takes
    Kind kind;
    const char* value;  // the value's name ("DIR"), nullptr for a flag
    const char* needs;  // what a missing or empty value is reported as needing
    void (*set)(Args& args, std::string_view value);
    const char* help;   // the Options section of --help; each '\n' starts a continuation line
};

// In the order --help lists them (and the order of the "does not apply" checks).
constexpr Option kOptions[] = {
    {"--root", kRoot, Kind::Value, "DIR", "a directory",
     [](Args& a, std::string_view v) { a.root = std::string(v); },
     "Resolve every path under DIR instead of / (sys/, proc/, dev/, run/,\n"
     "etc/vfiod/): inspect a captured or synthetic host tree."},
    {"--config", kConfig, Kind::Value, "FILE", "a file",
     [](Args& a, std::string_view v) { a.config = std::string(v); },
     "Read FILE (and FILE's sibling conf.d/*.toml) instead of\n"
     "DIR/etc/vfiod/vfiod.toml and DIR/etc/vfiod/conf.d/*.toml."},
    {"--kubevirt-cr", kKubevirtCr, Kind::Value, "FILE", "a file",
     [](Args& a, std::string_view v) { a.kubevirt_cr = std::string(v); },
     "doctor: check the KubeVirt CR in FILE (YAML or JSON, as kubectl\n"
     "get kubevirt prints it): would virt-handler remove vfiod's mdevs?"},
    {"--kernel", kKernel, Kind::Value, "VERSION", "a kernel version",
     [](Args& a, std::string_view v) { a.kernel = std::string(v); },
     "initramfs: the kernel the image is for (default: the running one);\n"
     "with --output, also record DIR/var/lib/vfiod/initramfs-VERSION.json."},
    {"--output", kOutput, Kind::Value, "FILE", "a file",
     [](Args& a, std::string_view v) { a.output = std::string(v); },
     "initramfs: write the list the initramfs reads to FILE (the hooks do)."},
    {"--image", kImage, Kind::Modifier, nullptr, nullptr,
     [](Args& a, std::string_view) { a.image = true; },
     "initramfs: an image build: this host's devices are not the target's;\n"
     "carry entries with an address and a vendor:device, unchecked."},
    {"--json", kJson, Kind::Format, nullptr, nullptr,
     [](Args& a, std::string_view) { a.json = true; },
     "Machine-readable output for scripts (plan, apply, status, doctor,\ncheck-config, "
     "initramfs)."},
    {"--offline", kOffline, Kind::Modifier, nullptr, nullptr,
     [](Args& a, std::string_view) { a.offline = true; },
     "status: read sysfs under --root instead of asking the daemon."},
    {"--yaml", kYaml, Kind::Format, nullptr, nullptr,
     [](Args& a, std::string_view) { a.yaml = true; }, "kubevirt: YAML output (the default)."},
    {"--external", kExternal, Kind::Modifier, nullptr, nullptr,
     [](Args& a, std::string_view) { a.external = true; },
     "kubevirt: mark the resources externalResourceProvider: true."},
    {"--json-patch", kJsonPatch, Kind::Format, nullptr, nullptr,
     [](Args& a, std::string_view) { a.json_patch = true; },
     "kubevirt: RFC 6902 add operations instead of a fragment."},
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
    {"doctor", run_doctor, kRoot | kConfig | kKubevirtCr | kJson, nullptr,
     "explain, per allowlisted device, whether it is ready and what KubeVirt will count"},
    {"kubevirt", run_kubevirt, kRoot | kConfig | kJson | kYaml | kExternal | kJsonPatch, nullptr,
     "print the KubeVirt CR fragment (permitted pciHostDevices, HostDevices gate) for the "
     "allowlist"},
    {"initramfs", run_initramfs, kRoot | kConfig | kKernel | kOutput | kImage | kJson, nullptr,
     "show (or, with --output, write) the early entries an initramfs carries, each matched by "
     "address and vendor:device"},
};

// --help: the text around the Options section, which kOptions fills in.
const char kHelpHead[] = R"(Usage: vfioctl [OPTIONS] COMMAND [ARGS]

Prepare PCI devices for pass-through: vfioctl shows and explains what the vfiod daemon does,
which is to bind whole IOMMU groups of allowlisted devices to vfio-pci through driver_override,
never a partial group and never a device the host is using.

Commands:
  plan                 Dry run: one decision per IOMMU group that holds an allowlisted device
                       (bind, bound or refuse with a reason) and the exact sysfs writes.
                       Reads the host (or --root tree) and the configuration; writes nothing.
  apply                Execute the plan once, without the daemon (root only; refused while
                       vfiod runs, which would race it). Prints each group's outcome;
                       exit 0 only if every bind/bound group ended bound (a group
                       refused at the last moment, for an exclusive claim, exits 1).
  doctor               Explain, per allowlisted device, whether it is ready for pass-through,
                       what blocks it and how to fix that, and what KubeVirt will count.
                       --kubevirt-cr FILE also checks that the KubeVirt CR lets vfiod's
                       mdevs be (virt-handler removes mdevs of types it does not know).
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
  initramfs            What an initramfs carries for early = true entries, which the
                       initramfs-tools hook and the dracut module call (with --output) when
                       an image is built: the groups vfiod would bind, whole, each function
                       matched by address and vendor:device; an entry whose group holds the
                       root filesystem, /usr, swap, the resume device or a mounted
                       filesystem is left out with a warning. In a chroot, a container or
                       with --image the host-use check is not possible: only entries with
                       an address and a vendor:device are carried. Exit 0 when the list was
                       written (whatever it left out), 2 on a bad configuration.

Who may do what: everyone may read (status, and plan/doctor on what they can read). bind,
release and the daemon's Reload need root, or the polkit action org.vfiod1.manage, which an
administrator grants to a Unix group with a rules file: copy
/usr/share/doc/vfiod/examples/50-vfiod.rules to /etc/polkit-1/rules.d/ and name the group.
vfiod never prompts for a password; without polkitd only root may.

Options:
)";

const char kHelpTail[] = R"(  -h, --help           Show this help, or a command's help: vfioctl COMMAND --help.
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
  vfioctl initramfs                     what update-initramfs would put in for early binding

Files:
  /etc/vfiod/vfiod.toml, /etc/vfiod/conf.d/*.toml   configuration
  /run/vfiod/                                       the daemon's journal of bindings
  /var/lib/vfiod/initramfs-VERSION.json             what each kernel's initramfs carries
)";

// One option of the Options section: its spelling in a 21-column field, then its help, each
// continuation line indented to the same column.
void print_option_help(const Option& o) {
    std::string spelled = std::string(o.name) + (o.value ? std::string(" ") + o.value : "");
    std::string_view help = o.help;
    std::printf("  %-21s", spelled.c_str());
    for (size_t nl; (nl = help.find('\n')) != std::string_view::npos; help.remove_prefix(nl + 1))
        std::printf("%.*s\n%23s", static_cast<int>(nl), help.data(), "");
    std::printf("%.*s\n", static_cast<int>(help.size()), help.data());
}

void print_help() {
    std::fputs(kHelpHead, stdout);
    for (const Option& o : kOptions)
        print_option_help(o);
    std::fputs(kHelpTail, stdout);
}

void print_verb_help(const Verb& v) {
    std::printf("Usage: vfioctl %s%s%s", v.name, v.operand ? " " : "", v.operand ? v.operand : "");
    for (Kind kind : {Kind::Value, Kind::Modifier, Kind::Format})
        for (const Option& o : kOptions)
            if (o.kind == kind && (v.opts & o.bit))
                std::printf(" [%s%s%s]", o.name, o.value ? " " : "", o.value ? o.value : "");
    std::printf("\n\n%s.\n\nSee vfioctl --help for the options and exit codes.\n", v.summary);
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "vfioctl: %s\nTry 'vfioctl --help'.\n", message.c_str());
    return kExitUsage;
}

// The option `arg` spells: "--json" exactly, a value option also as "--root=DIR".
const Option* find_option(std::string_view arg) {
    for (const Option& o : kOptions) {
        std::string_view name = o.name;
        if (arg == name || (o.value && arg.size() > name.size() &&
                            arg.substr(0, name.size()) == name && arg[name.size()] == '='))
            return &o;
    }
    return nullptr;
}

// What the command line says, before the checks that need the verb.
struct CommandLine {
    Args args;
    const Verb* verb = nullptr;
    bool help = false;
    std::vector<std::string> operands;
    unsigned seen = 0;  // the Opt bits given
};

// Reads one option into `cl`, its value from "--name=VALUE" or the next word (`i` moves past it).
std::optional<int> take_option(const Option& o, const std::vector<std::string_view>& argl,
                               size_t& i, CommandLine& cl) {
    std::string_view a = argl[i];
    std::string_view value;
    if (o.value) {
        size_t n = std::strlen(o.name);
        if (a.size() > n)
            value = a.substr(n + 1);
        else if (i + 1 < argl.size())
            value = argl[++i];
        if (value.empty())
            return usage_error(std::string(o.name) + " needs " + o.needs);
    }
    o.set(cl.args, value);
    cl.seen |= o.bit;
    return std::nullopt;
}

// Parses the words into `cl`; an exit status when that ends the run (--version, a usage error).
std::optional<int> parse(const std::vector<std::string_view>& argl, CommandLine& cl) {
    for (size_t i = 0; i < argl.size(); ++i) {
        std::string_view a = argl[i];
        if (a == "-h" || a == "--help") {
            cl.help = true;
        } else if (a == "--version") {
            std::printf("vfioctl %s\n", VFIOD_VERSION);
            return kExitOk;
        } else if (const Option* o = find_option(a)) {
            if (auto rc = take_option(*o, argl, i, cl))
                return rc;
        } else if (a == "--") {
            for (++i; i < argl.size(); ++i)
                cl.operands.emplace_back(argl[i]);
        } else if (a.size() > 1 && a[0] == '-') {
            return usage_error("unknown option '" + std::string(a) + "'");
        } else if (!cl.verb) {
            for (const Verb& v : kVerbs)
                if (a == v.name)
                    cl.verb = &v;
            if (!cl.verb)
                return usage_error("unknown command '" + std::string(a) + "'");
        } else {
            cl.operands.emplace_back(a);
        }
    }
    return std::nullopt;
}

// At most one output format: "--json, --yaml and --json-patch exclude each other".
std::optional<int> check_formats(unsigned seen) {
    std::vector<const Option*> formats;
    for (const Option& o : kOptions)
        if (o.kind == Kind::Format)
            formats.push_back(&o);
    std::string names;
    int given = 0;
    for (size_t k = 0; k < formats.size(); ++k) {
        names += (k == 0 ? "" : k + 1 == formats.size() ? " and " : ", ");
        names += formats[k]->name;
        given += (seen & formats[k]->bit) ? 1 : 0;
    }
    if (given > 1)
        return usage_error(names + " exclude each other");
    return std::nullopt;
}

// The checks that need the verb: its options, its operand, one format, an existing --root.
std::optional<int> check(CommandLine& cl) {
    const Verb& verb = *cl.verb;
    for (const Option& o : kOptions)
        if ((cl.seen & o.bit) && !(verb.opts & o.bit))
            return usage_error(std::string(o.name) + " does not apply to '" + verb.name + "'");
    if (verb.operand) {
        if (cl.operands.size() != 1)
            return usage_error(std::string("'") + verb.name + "' takes exactly one " + verb.operand);
        cl.args.operand = cl.operands[0];
    } else if (!cl.operands.empty()) {
        return usage_error("unexpected argument '" + cl.operands[0] + "'");
    }
    if (auto rc = check_formats(cl.seen))
        return rc;
    if (cl.seen & kRoot) {
        struct stat st;
        if (stat(cl.args.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            return usage_error("--root " + cl.args.root + ": not a directory");
    }
    return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
    CommandLine cl;
    if (auto rc = parse(std::vector<std::string_view>(argv + 1, argv + argc), cl))
        return *rc;
    if (!cl.verb) {
        if (cl.help) {
            print_help();
            return kExitOk;
        }
        return usage_error("no command given");
    }
    if (cl.help) {
        print_verb_help(*cl.verb);
        return kExitOk;
    }
    if (auto rc = check(cl))
        return *rc;
    return cl.verb->run(cl.args);
}
