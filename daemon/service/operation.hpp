// An operation, as a group's queue runs it: decided on the loop when it reaches the front of its
// group's queue (prepare), its writes on a worker thread (run), what they did published back on
// the loop (complete). Each kind is a class of its own (service/group_ops.hpp,
// service/pf_ops.hpp); the service and the queue run every kind alike, and a new kind is a new
// class, not a branch through them (docs/ARCHITECTURE.md, "Where a new operation kind plugs in").
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/health.hpp"
#include "core/pci_address.hpp"
#include "service/op_result.hpp"

namespace vfiod {

struct ServiceParts;  // service/service_parts.hpp

// What an operation asks of the service, on the loop: operations of their own, in their own
// turns, never run from within another one.
class FollowUps {
public:
    // The group's decision, queued after what its queue holds now.
    virtual void decide(unsigned group) = 0;
    // The PFs not ready yet, tried again (a VF was let go; DESIGN §11).
    virtual void retry_pfs() = 0;
    // The VFs among `vfs` left to the host, probed; `finishing`: the PF whose change is ending.
    virtual void probe_left(const std::set<PciAddress>& vfs, const PciAddress* finishing) = 0;
    // The group the current entry decides: published `failed` if the entry throws.
    virtual void deciding(unsigned group) = 0;
    // The group's health checked (DESIGN §13); `released`: after a release, the driver each
    // function went back to.
    virtual void check_health(unsigned group, HealthCheck why,
                              const std::map<PciAddress, std::string>& released = {}) = 0;

protected:
    ~FollowUps() = default;
};

class Operation {
public:
    virtual ~Operation() = default;

    // What the error line says it was doing when it threw: "Bind", "deciding a group".
    virtual const char* what() const = 0;
    // On the loop: the answer when the operation ends here, without writes; otherwise the
    // operation now knows its writes, and fenced() the functions the loop must not read until
    // complete() (a write may block in the kernel, and a read of the same device with it).
    virtual std::optional<OpResult> prepare(ServiceParts& s) = 0;
    virtual std::set<PciAddress> fenced() const = 0;
    // The same for mdev parents and mdevs, by name (DESIGN §12): most operations fence none.
    virtual std::set<std::string> fenced_mdevs() const { return {}; }
    // On a worker thread: the writes, through the executor; nothing else of the service but the
    // running config (a Reload waits for the operations in flight, DESIGN §6).
    virtual void run(ServiceParts& s) = 0;
    // Back on the loop: what the writes did, re-read and published; the caller's answer.
    virtual OpResult complete(ServiceParts& s) = 0;
};

using OperationPtr = std::shared_ptr<Operation>;

// An operation run to its end on the caller's thread, unfenced (no worker, no loop).
OpResult run_now(Operation& op, ServiceParts& s);

}  // namespace vfiod
