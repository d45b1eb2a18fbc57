// The status store: what the deciders set and read back, and what the consumers (the D-Bus
// objects) are told from it. Every group's and PF's published status and its log line, the inventory built from the host model, what changed since the last publication
// (dirty groups, or everything), and the replies held until that publication. It reads the
// host model and the journal; it must not re-read the host, decide a group or write anything.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/state.hpp"
#include "service/inventory.hpp"
#include "service/op_result.hpp"

namespace vfiod {

class HealthTracker;
class HostModel;
class Journal;

class StatusStore {
public:
    StatusStore(const HostModel& host, const Journal& journal, const HealthTracker& health,
                std::function<Mode()> mode)
        : in_{host, journal, health}, mode_(std::move(mode)) {}

    void set_on_change(OnChange cb) { on_change_ = std::move(cb); }
    Mode mode() const { return mode_(); }
    const Inventory& inventory() const { return inventory_; }

    const std::map<unsigned, GroupStatus>& statuses() const { return status_; }
    const GroupStatus* status(unsigned group) const;
    // Logs the change (one line per state change) and marks the group for publication.
    void set_status(unsigned group, GroupStatus s);
    void forget_group(unsigned group);
    // The group's view may have changed (nullopt: any group's may have).
    void mark(std::optional<unsigned> group);

    // SR-IOV PFs (DESIGN §11), the same way: a status per governed PF, its change logged.
    const PfStatus* pf_status(const PciAddress& pf) const;
    void set_pf_status(const PciAddress& pf, PfStatus s);

    // Mediated devices (DESIGN §12): the records `replaced` selects give way to `now` (a pair's,
    // a parent's, or every one), each state change logged; published with the next publish().
    void set_mdevs(const std::function<bool(const MdevInfo&)>& replaced,
                   std::vector<MdevInfo> now);
    const std::map<std::string, MdevInfo>& mdevs() const { return inventory_.mdevs; }

    // Device health (DESIGN §13): the function's state changed in the HealthTracker; its group
    // and the mdevs it is the parent of are published again.
    void health_changed(const PciAddress& fn);
    // Whether a published mdev has the function as its parent.
    bool is_mdev_parent(const PciAddress& fn) const;

    // Sends `reply` once what this dispatch changed is published (publish()).
    void answer(Reply reply, OpResult r);
    // Service::publish(): never throws.
    void publish();
    // Publishes the changes; throws what on_change_ throws.
    void publish_changes();

private:
    std::optional<std::pair<GroupInfo, std::vector<DeviceInfo>>> group_view(unsigned id) const;
    // Brings one group's part of inventory_ up to date, noting in *change what differed.
    void update_group(unsigned g, InventoryChange* change);
    void send_replies();
    // Brings every PF's part of inventory_ up to date: a host has few PFs, and their counts
    // change with any read of the host.
    void update_pfs(InventoryChange* change);
    // An mdev's health, its parent's (a virtual parent is not a PCI function: unknown).
    void stamp_health(MdevInfo* m) const;

    // What it reads, never changes.
    struct {
        const HostModel& host;
        const Journal& journal;
        const HealthTracker& health;
    } in_;
    std::function<Mode()> mode_;
    std::map<unsigned, GroupStatus> status_;
    std::map<PciAddress, PfStatus> pf_status_;
    // What may have changed since publish(): these groups' views, or everything (start-up,
    // Reload).
    struct {
        std::set<unsigned> groups;
        bool all = true;
    } dirty_;
    // What on_change_ has not been told yet: everything at first, and what a publication that
    // threw did not get across.
    InventoryChange unsent_{
        .manager = true, .groups = {}, .devices = {}, .pfs = {}, .mdevs = {}};
    std::vector<std::pair<Reply, OpResult>> replies_;  // held until publish()
    Inventory inventory_;
    OnChange on_change_;
};

}  // namespace vfiod
