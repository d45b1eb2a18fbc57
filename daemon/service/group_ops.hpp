// The operations on a group's functions: the daemon's own decision (a bind, the early-override
// clean-up), an operator's Bind and Release, and finishing what the last run left unfinished.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "service/service_parts.hpp"

namespace vfiod {

// A group's writes as the Decider decides them; the kinds differ in how they ask it.
class GroupWriteOp : public Operation {
public:
    std::optional<OpResult> prepare(ServiceParts& s) final;
    std::set<PciAddress> fenced() const final;
    void run(ServiceParts& s) final;
    OpResult complete(ServiceParts& s) final;

private:
    virtual GroupWrite decide(ServiceParts& s) = 0;

    GroupWrite write_;
    GroupOutcome outcome_;
};

// What the daemon does with a group on its own (coldplug, a udev event, a reload).
class DecideOp final : public GroupWriteOp {
public:
    DecideOp(unsigned group, bool from_events) : group_(group), from_events_(from_events) {}
    const char* what() const override { return "deciding a group"; }

private:
    GroupWrite decide(ServiceParts& s) override;
    unsigned group_;
    bool from_events_;  // a udev event, not coldplug or a reload: drift is looked for
};

// An operator's Bind or Release of the function at `address`, as the caller wrote it (the
// Decider answers a malformed one; the service routes a well-formed one to its group's queue).
class OperatorOp : public GroupWriteOp {
public:
    explicit OperatorOp(std::string address) : address_(std::move(address)) {}
    const std::string& address() const { return address_; }

protected:
    std::string address_;
};

class BindOp final : public OperatorOp {
public:
    using OperatorOp::OperatorOp;
    const char* what() const override { return "Bind"; }

private:
    GroupWrite decide(ServiceParts& s) override;
};

class ReleaseOp final : public OperatorOp {
public:
    using OperatorOp::OperatorOp;
    const char* what() const override { return "Release"; }

private:
    GroupWrite decide(ServiceParts& s) override;
};

// A group's journal entry from the last run, finished or rolled back (enforce mode, start-up);
// the group's decision follows in its queue.
class ReconcileOp final : public Operation {
public:
    explicit ReconcileOp(unsigned group) : group_(group) {}
    const char* what() const override { return "finishing the last run's operation"; }
    std::optional<OpResult> prepare(ServiceParts& s) override;
    std::set<PciAddress> fenced() const override { return functions_; }
    void run(ServiceParts& s) override;
    OpResult complete(ServiceParts& s) override;

private:
    unsigned group_;
    std::set<PciAddress> functions_;  // the journal entry names them
    GroupOutcome outcome_;
};

}  // namespace vfiod
