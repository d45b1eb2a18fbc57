// NodePrepareResources and NodeUnprepareResources behind the gRPC servers (DESIGN §10): the
// claim read from the API server and checked (api_objects.hpp), the group rule
// (group_reservations.hpp), the CDI spec (cdi.hpp) and the device-metadata files (metadata.hpp)
// written, and a checkpoint per claim (checkpoints.hpp) so that a retried Prepare (after a
// restart too) answers the same CDI IDs and Unprepare removes exactly what Prepare wrote. The
// Preparer puts those steps in order. Thread-safe: the kubelet may call for many claims at once
// from gRPC's threads; one call at a time works on a claim.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claims.hpp"
#include "devices.hpp"
#include "io/host_fs.hpp"
#include "kube_api.hpp"

namespace vfiod::dra {

class Preparer {
public:
    struct Options {
        std::string driver;     // "vfio.vfiod.io"
        std::string node;       // the pool's name
        std::string cdi_dir;    // host path, "/var/run/cdi" (under the root, like every path)
        std::string state_dir;  // host path of the checkpoints, "/var/lib/vfiod-dra-plugin"
        std::chrono::milliseconds request_timeout{10000};
    };
    using InventoryFn = std::function<std::shared_ptr<const DraInventory>()>;

    // Every file is written under host.root() (--root), through directories opened beneath it;
    // every answer names host paths.
    Preparer(Options o, KubeApi& api, InventoryFn inventory, const HostFs& host);
    // Reads the checkpoints: claims prepared before a restart. Damaged ones are logged, named
    // and set aside, never trusted. False and *err when the state directory cannot be used.
    bool load(std::string* err);

    PrepareResult prepare(const ClaimRef& claim, const CallLimit& limit = {});
    // "" when nothing of the claim is left (also when it was never prepared); otherwise why.
    std::string unprepare(const ClaimRef& claim, const CallLimit& limit = {});

    // The claims prepared now, by UID (tests).
    std::vector<std::string> prepared() const;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace vfiod::dra
