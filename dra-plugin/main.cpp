// vfiod-dra-plugin: the Kubernetes DRA kubelet plugin fed by vfiod's D-Bus inventory (DESIGN
// §10). This file says what its command line is and checks it, finds the API server and makes
// the state directory its lock goes on; plugin_main.hpp starts it, and DraPlugin (plugin.hpp)
// does the work.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "infra/fd.hpp"
#include "io/host_fs.hpp"
#include "plugin.hpp"
#include "plugin_main.hpp"

namespace {

using namespace vfiod;
using namespace vfiod::dra;
using namespace vfiod::plugin;

constexpr const char* kUsage =
    "Usage: vfiod-dra-plugin [--node-name NODE] [--driver-name NAME] [--kubeconfig FILE |\n"
    "                        --api-server URL --token-file FILE --ca-file FILE]\n"
    "                        [--registrar-dir DIR] [--plugin-dir DIR] [--cdi-dir DIR]\n"
    "                        [--state-dir DIR] [--root DIR] [--verbose]\n"
    "\n"
    "Serves vfiod's pass-through devices to Kubernetes by Dynamic Resource Allocation\n"
    "(resource.k8s.io/v1): one DRA device per allowlisted PCI function whose IOMMU group vfiod\n"
    "has bound to vfio-pci and whose /dev/vfio/<N> exists, published in ResourceSlices of this\n"
    "node's pool and withdrawn on release; NodePrepareResources answers CDI devices for the whole\n"
    "group and a device-metadata file with the function's pciBusID (what KubeVirt reads). A claim\n"
    "that would split an IOMMU group between two claims is refused, naming both. vfiod's health\n"
    "of each device goes to the kubelet's DRAResourceHealth stream (v1, v1alpha1), and a failed\n"
    "device stays published with the taint vfiod.io/unhealthy (NoSchedule). It never starts\n"
    "vfiod and never binds or releases anything.\n"
    "\n"
    "  --node-name NODE      this node's name (default: $NODE_NAME); the pool's name\n"
    "  --driver-name NAME    the DRA driver name (default vfio.vfiod.io)\n"
    "  --kubeconfig FILE     the API server and credentials (token, token file or client\n"
    "                        certificate; exec and auth-provider users are refused)\n"
    "  --api-server URL      the API server (https://...), with --token-file and --ca-file\n"
    "  --token-file FILE     a bearer token, re-read when it changes\n"
    "  --ca-file FILE        the cluster CA (PEM)\n"
    "                        Neither: the pod's service account (KUBERNETES_SERVICE_HOST/PORT)\n"
    "  --registrar-dir DIR   the kubelet's plugin registration directory\n"
    "                        (default /var/lib/kubelet/plugins_registry)\n"
    "  --plugin-dir DIR      where dra.sock is served (default /var/lib/kubelet/plugins/NAME)\n"
    "  --cdi-dir DIR         where CDI specs are written (default /var/run/cdi)\n"
    "  --state-dir DIR       prepared claims' checkpoints and metadata files\n"
    "                        (default /var/lib/vfiod-dra-plugin)\n"
    "  --root DIR            look up every path above, dev/vfio and sys under DIR (tests);\n"
    "                        answers still name host paths such as /dev/vfio/13\n"
    "  --verbose             debug logging\n"
    "  --help, --version\n"
    "\n"
    "DBUS_SYSTEM_BUS_ADDRESS selects another system bus. SIGTERM stops serving the kubelet and\n"
    "exits 0; the slices stay for the kubelet to remove.\n"
    "Exit status: 0 stopped by a signal; 1 runtime failure (no system bus, unusable API server\n"
    "credentials or directories, another instance for the same driver); 2 bad arguments.\n";

// Says what is wrong with the command line: the exit code for it.
int usage_error(const std::string& what) {
    std::fprintf(stderr, "vfiod-dra-plugin: %s\n(see vfiod-dra-plugin --help)\n", what.c_str());
    return 2;
}

// A DNS subdomain (RFC 1123) of at most `max` characters: what the API takes as a node name,
// and (63) as a driver name.
bool dns_subdomain(const std::string& s, size_t max) {
    if (s.empty() || s.size() > max)
        return false;
    char prev = '.';
    for (char c : s) {
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && c != '.')
            return false;
        if ((c == '.' || c == '-') && prev == '.')
            return false;
        if (c == '.' && prev == '-')
            return false;
        prev = c;
    }
    return prev != '-' && prev != '.';
}

CommandLine command_line(Options* o) {
    return {"vfiod-dra-plugin", kUsage, &o->verbose,
            {{"--node-name", &o->node},
             {"--driver-name", &o->driver},
             {"--kubeconfig", &o->api.kubeconfig},
             {"--api-server", &o->api.server},
             {"--token-file", &o->api.token_file},
             {"--ca-file", &o->api.ca_file},
             {"--registrar-dir", &o->registrar_dir},
             {"--plugin-dir", &o->plugin_dir},
             {"--cdi-dir", &o->cdi_dir},
             {"--state-dir", &o->state_dir},
             {"--root", &o->root}},
            [](const std::string& what, bool) { usage_error(what); }};
}

// The options together, once parsed (and $NODE_NAME read): 0 when they make sense, else the
// exit code after saying why. --plugin-dir takes no empty value, so an empty one was not given.
int check(Options* o) {
    if (o->node.empty())
        if (const char* env = std::getenv("NODE_NAME"))
            o->node = env;
    if (o->node.empty())
        return usage_error("no node name: give --node-name or set NODE_NAME");
    if (!dns_subdomain(o->node, 253))
        return usage_error("node name '" + o->node + "' is not a DNS subdomain");
    if (!dns_subdomain(o->driver, 63))
        return usage_error("driver name '" + o->driver +
                           "' is not a DNS subdomain of at most 63 characters");
    if (o->plugin_dir.empty())
        o->plugin_dir = "/var/lib/kubelet/plugins/" + o->driver;
    for (const std::string* dir : {&o->registrar_dir, &o->plugin_dir, &o->cdi_dir, &o->state_dir})
        if (dir->empty() || dir->front() != '/')
            return usage_error("'" + *dir + "' is not an absolute path");
    bool flags = !o->api.server.empty() || !o->api.token_file.empty() || !o->api.ca_file.empty();
    if (flags && !o->api.kubeconfig.empty())
        return usage_error("--kubeconfig and --api-server/--token-file/--ca-file exclude "
                           "each other");
    if (flags && (o->api.server.empty() || o->api.token_file.empty() || o->api.ca_file.empty()))
        return usage_error("--api-server needs --token-file and --ca-file, and they it");
    return 0;
}

bool find_api_server(const Options& o, ApiEndpoint* ep, std::string* err) {
    if (!o.api.kubeconfig.empty())
        return load_kubeconfig(o.api.kubeconfig, ep, err);
    if (o.api.server.empty())
        return in_cluster_endpoint(ep, err);
    if (o.api.server.rfind("https://", 0) != 0) {
        *err = "--api-server " + o.api.server + ": only https:// is supported";
        return false;
    }
    ep->server = o.api.server;
    while (ep->server.size() > 8 && ep->server.back() == '/')
        ep->server.pop_back();
    ep->token_file = o.api.token_file;
    ep->ca_file = o.api.ca_file;
    ep->origin = "--api-server";
    return true;
}

// The state directory and its parents, as the package would make them, made beneath the root (a
// link on the way out of a --root tree is refused): the instance lock is taken on it before
// anything is written there.
bool make_state_dir(const Options& o, std::string* err) {
    KernelHostFs host(o.root);
    int e = 0;
    Fd dir = host.open_own_dir(HostFs::rel_of(o.state_dir), true, &e);
    if (dir.get() < 0 || ::fchmod(dir.get(), 0700) != 0) {
        *err = "cannot create the state directory " + o.under_root(o.state_dir) + ": " +
               host.own_dir_error(dir.get() < 0 ? e : errno);
        return false;
    }
    return true;
}

// Before the lock: the API server found and its client made, and the state directory, which
// the lock goes on (one plugin per driver and root: a second one would take over the first
// one's sockets and fight it over the slices).
std::optional<std::string> prepare(const Options& o, ApiEndpoint* endpoint,
                                   std::unique_ptr<KubeApi>* api) {
    std::string err;
    if (!find_api_server(o, endpoint, &err) || !(*api = make_curl_api(*endpoint, &err)) ||
        !make_state_dir(o, &err)) {
        spdlog::critical("{}", err);
        return std::nullopt;
    }
    return o.under_root(o.state_dir);
}

int serve(const Options& o, const ApiEndpoint& endpoint, KubeApi& api, sdbus::IConnection& bus,
          Loop& loop) {
    spdlog::info("vfiod-dra-plugin {} starting: driver {}, node {}, API server {}, root {}",
                 VFIOD_VERSION, o.driver, o.node, endpoint.server, o.root);
    DraPlugin plugin(o, bus, loop, api);
    return plugin.run(bus);
}

}  // namespace

int main(int argc, char** argv) {
    Options opts;
    if (std::optional<int> exit = parse_command_line(argc, argv, command_line(&opts)))
        return *exit;
    if (int exit = check(&opts))
        return exit;
    ApiEndpoint endpoint;
    std::unique_ptr<KubeApi> api;
    return run_plugin({"vfiod-dra-plugin", opts.verbose,
                       [&] { return prepare(opts, &endpoint, &api); },
                       [&](sdbus::IConnection& bus, Loop& loop) {
                           return serve(opts, endpoint, *api, bus, loop);
                       }});
}
