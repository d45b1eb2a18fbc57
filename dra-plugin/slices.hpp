// The pool's ResourceSlices kept right on the API server (DESIGN §10): the devices to publish
// come from the loop (publish()), the slices the server has come from a watch on the plugin's
// own slices (fieldSelector spec.nodeName + spec.driver), and one thread reconciles the two:
// create what is missing, update what differs, delete what is not ours any more (stale slices of
// an earlier run are deleted at start). A kubelet that deletes the node's slices sees them back
// within 1 s. Never polls: the watch and publish() wake it. Failures (429, 5xx, no answer) back
// off from 100 ms doubling to 30 s; refusals (401, 403, 422) wait 30 s unless a new token is
// read first or, a second after the refusal at the earliest, publish() brings other devices.
// A failed device carries the vfiod.io/unhealthy taint; a server that drops taints (DESIGN §13)
// gets failed devices withdrawn instead. Nothing here blocks the loop or the gRPC side.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "devices.hpp"
#include "kube_api.hpp"

namespace vfiod::dra {

class SlicePublisher {
public:
    struct Options {
        std::string driver;  // "vfio.vfiod.io"
        std::string node;
        std::chrono::milliseconds request_timeout{10000};
        // Retries after a failure: backoff_min doubling up to backoff_max; a refusal that
        // retrying alone will not cure (401, 403, 422) waits backoff_max. Tests shorten them.
        std::chrono::milliseconds backoff_min{100};
        std::chrono::milliseconds backoff_max{30000};
        // The watch: the server ends it after this (timeoutSeconds), and a stream silent for
        // watch_idle (no event, no bookmark) is taken for a dead connection and listed again.
        int watch_timeout_seconds = 300;
        std::chrono::milliseconds watch_idle{120000};
    };
    // What the publisher has done, for tests and benchmarks.
    struct Stats {
        uint64_t creates = 0, updates = 0, deletes = 0, failures = 0;
        int64_t generation = 0;   // the pool's generation last written
        bool in_sync = false;     // the server's slices are the ones wanted, as far as known
        uint64_t lists = 0;       // the slices listed (at start, after a 410 or a dropped watch)
        uint64_t watch_events = 0;  // ADDED, MODIFIED, DELETED seen
        std::string node_uid;     // the Node's UID once read
        bool taints_dropped = false;  // the server drops device taints: failed are withdrawn
    };

    SlicePublisher(KubeApi& api, Options o);
    ~SlicePublisher();  // stop()
    SlicePublisher(const SlicePublisher&) = delete;
    SlicePublisher& operator=(const SlicePublisher&) = delete;

    // Starts the threads: the Node's UID (for the owner reference) read, the slices listed and
    // watched, then reconciled. Returns at once; failures are logged and retried.
    void start();
    // From any thread: the devices to publish from now on. Cheap; the writes happen on the
    // publisher's thread, coalesced with any publish() that follows before they start.
    void publish(std::vector<DraDevice> devices);
    // Ends the threads (within the request timeout). The slices stay: a stopping plugin keeps
    // them, as the kubelet removes a gone plugin's slices itself.
    void stop();
    Stats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace vfiod::dra
