// The SR-IOV operations (DESIGN §11), each in the queue of the PF's or the VF's group: a PF's VF
// count change, settling a PF's journal entry from the last run, and a VF that no entry
// allowlists sent to its host driver.
#pragma once

#include <optional>
#include <set>

#include "service/service_parts.hpp"

namespace vfiod {

// A PF that an [[sriov]] entry governs: its status, or its count change (PfDecider).
class PfChangeOp final : public Operation {
public:
    explicit PfChangeOp(const PciAddress& pf) : pf_(pf) {}
    const char* what() const override { return "an SR-IOV operation"; }
    std::optional<OpResult> prepare(ServiceParts& s) override;
    // The PF only: a blocked sriov_numvfs store holds the PF's device lock, which its
    // attributes' reads take; the VFs come and go meanwhile, and their events must be heard.
    std::set<PciAddress> fenced() const override { return {pf_}; }
    void run(ServiceParts& s) override;
    OpResult complete(ServiceParts& s) override;

private:
    PciAddress pf_;
    std::optional<PfPlan> plan_;
    PfOutcome outcome_;
};

// The last run's journal entry of a PF (enforce mode, start-up), checked against the config and
// the VFs' users before any write (Executor::reconcile_pf).
class PfSettleOp final : public Operation {
public:
    explicit PfSettleOp(const PciAddress& pf) : pf_(pf) {}
    const char* what() const override { return "an SR-IOV operation"; }
    std::optional<OpResult> prepare(ServiceParts& s) override;
    std::set<PciAddress> fenced() const override { return {pf_}; }  // as PfChangeOp's
    void run(ServiceParts& s) override;
    OpResult complete(ServiceParts& s) override;

private:
    PciAddress pf_;
    std::optional<unsigned> wanted_;  // the count an entry wants now; nullopt: none governs it
    PfOutcome outcome_;
};

// A VF left to the host: its PF's autoprobe was 0 when it was made, so it goes to its host
// driver through drivers_probe, as it would have without vfiod.
class VfProbeOp final : public Operation {
public:
    explicit VfProbeOp(const PciAddress& vf) : vf_(vf) {}
    const char* what() const override { return "an SR-IOV operation"; }
    std::optional<OpResult> prepare(ServiceParts&) override { return std::nullopt; }
    std::set<PciAddress> fenced() const override { return {vf_}; }
    void run(ServiceParts& s) override;
    OpResult complete(ServiceParts& s) override;

private:
    PciAddress vf_;
    int error_ = 0;
};

}  // namespace vfiod
