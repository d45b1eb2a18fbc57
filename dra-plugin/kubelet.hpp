// The kubelet side of vfiod-dra-plugin (DESIGN §10): the plugin-registration service on
// <registrar-dir>/<driver>-reg.sock (package pluginregistration, GetInfo answers DRAPlugin, the
// driver, the DRA socket and "v1.DRAPlugin") and the DRA service on <plugin-dir>/dra.sock
// (package k8s.io.kubelet.pkg.apis.dra.v1, NodePrepareResources, NodeUnprepareResources, and the
// DRAResourceHealth streams of health_stream.hpp, v1 and v1alpha1, which GetInfo lists too),
// gRPC over unix sockets. Each claim of a call goes to the Preparer; claims of one
// call are answered independently, and those left when the kubelet gives up on the call (its
// deadline, a cancel) are answered with that error unworked. A registration socket someone
// removed is served again.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "health_stream.hpp"
#include "prepare.hpp"

namespace vfiod::dra {

class KubeletServers {
public:
    struct Options {
        std::string driver;         // "vfio.vfiod.io"
        std::string registrar_dir;  // host path: where the kubelet's plugin watcher looks
        std::string plugin_dir;     // host path: where dra.sock goes
        std::string dra_endpoint;   // the DRA socket's host path, as GetInfo names it
        // --root: both directories are looked up beneath it, as Prepare's files are
        // (HostFs::open_own_dir): made there when missing, and a link on the way that leads out
        // of it is refused, never followed, so no socket is bound or removed outside it.
        std::string root = "/";
        // The health streams': their pool (the node) and timing.
        HealthStreams::Options health;
    };
    // Given the call's limit: a claim's work stops when the kubelet gives up on the call.
    using Prepare = std::function<PrepareResult(const ClaimRef&, const CallLimit&)>;
    using Unprepare = std::function<std::string(const ClaimRef&, const CallLimit&)>;

    KubeletServers(Options o, Prepare prepare, Unprepare unprepare);
    ~KubeletServers();  // shutdown()

    // The most claims one NodePrepareResources or NodeUnprepareResources call may name; a call
    // with more is refused (INVALID_ARGUMENT) before any claim is touched.
    static constexpr int kMaxClaimsPerCall = 1024;
    // How many calls are worked on at once (each on a thread of our own, never gRPC's), and
    // how many more may wait for one; a call beyond that is refused (RESOURCE_EXHAUSTED) and
    // the kubelet tries it again. Before start(); the defaults suit a kubelet.
    void set_limits(unsigned workers, size_t max_waiting_calls);

    // Both sockets served (stale socket files replaced, directories made beneath the root);
    // false and *err naming the path otherwise.
    bool start(std::string* err);
    // Serves the registration socket again when its file is gone or is not the one we serve,
    // its directory looked up beneath the root again (call it when the registrar directory
    // changed). Cheap when nothing changed.
    void check_registration();
    // Whether the kubelet said the registration failed, and its error ("" until it says).
    std::string registration_error() const;
    bool registered() const;
    // From any thread: the published devices, whose health the kubelet's streams say.
    void publish_health(const std::vector<DraDevice>& devices);
    HealthStreams::Stats health_stats() const;
    void shutdown();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace vfiod::dra
