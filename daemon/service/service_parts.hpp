// The parts every operation works with, bundled (service/operation.hpp says how they are used).
#pragma once

#include <functional>

#include "core/config.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "exec/mdev_writer.hpp"
#include "service/decider.hpp"
#include "service/health_tracker.hpp"
#include "service/host_model.hpp"
#include "service/operation.hpp"
#include "service/pf_decider.hpp"
#include "service/status_store.hpp"

namespace vfiod {

class HostFs;

// The service's parts, made with it and never replaced: operations on worker threads use them
// until they end, and the workers go before the service.
struct ServiceParts {
    ServiceParts(HostFs& fs, const std::function<Mode()>& mode, FollowUps& then);

    HostFs& fs;  // the executor's: writes, on worker threads
    Journal journal;
    Executor executor;
    HostModel host;
    HealthTracker health;  // DESIGN §13; on the loop only
    StatusStore store;
    Decider decider;
    PfDecider pf_decider;
    MdevWriter mdev_writer;  // DESIGN §12; its own bookkeeping of blocked removes
    FollowUps& then;
};

}  // namespace vfiod
