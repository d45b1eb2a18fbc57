// The loop's picture of the host: the running config, the snapshot, the kernel tables, the plan
// of every group holding an allowlisted function, who claims each group, and the fenced view
// every read goes through. It owns which functions are fenced (those being written), not why.
// It decides nothing, publishes nothing and never writes to the host: it must not touch the
// executor, the journal, group statuses or the operation queue.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/plan.hpp"
#include "io/host_fs.hpp"
#include "io/host_tables.hpp"
#include "io/snapshot.hpp"

namespace vfiod {

class FencedHostFs;

class HostModel {
public:
    // Told of every group whose plan was made again (nullopt: the whole host was re-read), so
    // the status store looks at them again.
    using Replanned = std::function<void(std::optional<unsigned> group)>;

    explicit HostModel(HostFs& fs);
    ~HostModel();
    HostModel(const HostModel&) = delete;
    HostModel& operator=(const HostModel&) = delete;

    void set_on_replan(Replanned cb) { on_replan_ = std::move(cb); }
    void set_table_watch(std::unique_ptr<TableWatch> watch) { tables_ = HostTables(std::move(watch)); }
    const HostTables& tables() const { return tables_; }

    const Config& config() const { return config_; }
    // The new config, the plans' input from the next read on; returns the one it replaces.
    Config replace_config(Config c);

    const Snapshot& snapshot() const { return snapshot_; }
    const std::map<unsigned, GroupPlan>& plans() const { return plans_; }
    const GroupPlan* group_plan(unsigned group) const;
    std::optional<unsigned> group_of(const PciAddress& a) const;
    std::set<PciAddress> members(const std::set<unsigned>& groups) const;
    // The plan of every PF an [[sriov]] entry governs (DESIGN §11), made again with the groups'
    // plans on every read: from the whole topology on reread(), and for the PFs a refresh()
    // names (a PF read, or the PF of a VF read) from their own VFs.
    const std::map<PciAddress, PfPlan>& pf_plans() const { return pf_plans_; }
    const PfPlan* pf_plan(const PciAddress& pf) const;
    // The addresses of pf_plans(): every PF an [[sriov]] entry governs.
    std::set<PciAddress> governed_pfs() const;
    // The governed PFs `touched` concerns as the snapshot has them: a PF among them, or the PF
    // of a VF among them.
    std::set<PciAddress> pfs_concerned(const std::set<PciAddress>& touched) const;
    // The VFs of a PF as the snapshot has them.
    std::set<PciAddress> vfs_of(const PciAddress& pf) const;
    // Every group's plan, no-iommu functions included, made from the snapshot now.
    Plan whole_plan() const;
    // Groups holding a function whose governing entries differ between `before` and the
    // running config.
    std::set<unsigned> groups_whose_entries_changed(const Config& before) const;

    // Reads the whole host again (start-up, Reload).
    void reread();
    // Re-reads what `touched` concerns; returns the groups re-planned (see host_model.cpp).
    std::set<unsigned> refresh(std::set<PciAddress> touched);

    // Functions being written, per group: the view reads none of their files until unfenced,
    // and the snapshot keeps their last record meanwhile (attributes, host-use findings).
    void fence_group(unsigned group, const std::set<PciAddress>& functions);
    void unfence_group(unsigned group);
    // Fences exactly the functions being written and those with a write `stuck` in the kernel.
    void refresh_fences(const std::vector<PciAddress>& stuck);
    // Fences exactly these mdev parents and mdevs (being written, or stuck; FencedHostFs).
    void fence_mdevs(const std::set<std::string>& names);
    // Whether the function is fenced now (being written, or stuck).
    bool fenced(const PciAddress& a) const;
    // The loop's reads of the host, through the fences: an operation's prepare() reads here.
    const HostFs& view() const;

private:
    // What a read of the host found odd (a FIFO for an attribute, junk names), logged as a
    // warning the first time it is seen, not again while it stays: a re-read does not repeat it.
    void log_host_warnings(const std::vector<std::string>& warnings, bool whole_host);
    void replanned(std::optional<unsigned> group) const;
    void replan_pfs();
    void replan_pfs(const std::set<PciAddress>& read);
    void update_strays(const std::set<unsigned>& groups, const std::set<PciAddress>& read);
    // Is `a` in the group's member list (sys/kernel/iommu_groups/N/devices)?
    bool listed_in(const PciAddress& a, unsigned group) const;
    void add_vf(const PciAddress& pf, const PciAddress& vf);

    std::unique_ptr<FencedHostFs> view_;  // the loop's reads
    Config config_;
    // The host as last read, and the plan of every group that holds an allowlisted function.
    // Start-up and Reload read everything; an event, an operation and its outcome re-read only
    // the groups concerned (refresh), so their cost does not grow with the host.
    Snapshot snapshot_;
    HostTables tables_;
    std::map<unsigned, GroupPlan> plans_;
    std::map<PciAddress, PfPlan> pf_plans_;
    // Functions whose iommu_group link names a group whose member list does not have them: none
    // on a sane host, so only these are kept (a set per group cost 127 bytes a function).
    std::map<unsigned, std::set<PciAddress>> strays_;
    // The VFs whose physfn names each PF, sorted; may still hold one that went or moved, until
    // its PF is planned again (readers check the topology).
    std::map<PciAddress, std::vector<PciAddress>> vfs_;
    std::set<std::string> host_warned_;                   // host warnings logged and still seen
    std::map<unsigned, std::set<PciAddress>> writing_;   // functions being written, per group
    Replanned on_replan_;
};

}  // namespace vfiod
