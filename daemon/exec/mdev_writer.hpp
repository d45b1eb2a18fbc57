// Carries out the mdev plan of one (parent, type) pair (DESIGN §12): its creates and removes,
// each write hang-safe (exec/hang_safe_write), as the executor carries out a group's or a PF's.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "exec/hang_safe_write.hpp"
#include "exec/journal.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// What became of one mdev the pair's plan wanted written.
struct MdevResult {
    std::string uuid;
    MdevAction action = MdevAction::Refuse;  // the planned Create or Remove
    Reason reason = Reason::None;  // None: written; else MdevUnavailable, InUseMdev,
                                   // WriteFailed or Stuck
    std::string message;           // the path and strerror, or who holds it
    bool operator==(const MdevResult&) const = default;
};

class MdevWriter {
public:
    // fs must outlive every write still blocked when the writer goes away. With a journal,
    // each write is recorded there before it starts and the record removed when it ends (kept,
    // `stuck`, when it blocks).
    MdevWriter(HostFs& fs, std::chrono::milliseconds timeout, Journal* journal = nullptr)
        : fs_(fs), timeout_(timeout), journal_(journal) {}

    // The Create and Remove mdevs of `pair` (plan_mdevs' records of one parent and type, in
    // its order), one result each; the others are not looked at. Creates first, all or
    // nothing as planned: available_instances is read again right before, and when it is below
    // the creates none is written (mdev-unavailable); then each UUID in index order, EEXIST
    // counting as made (the UUIDs are stable, so finishing an earlier run is idempotent), the
    // first failure ending the creates (those made stay; the rest are not written). Then the
    // removes, highest index first, each only if nobody holds it open right then (a fresh
    // proc/*/fd walk: in-use-mdev) and no earlier remove of it is still blocked; one that
    // blocks past the timeout is Stuck and remembered.
    std::vector<MdevResult> apply(const std::vector<MdevPlan>& pair);
    // A reloaded config's write_timeout, for the writes that start from now on. Any thread.
    void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
    // Whether a remove of uuid is still blocked in the kernel.
    bool stuck(const std::string& uuid);
    // The UUIDs, and their parents, of the writes still blocked in the kernel: the loop reads
    // none of their files (FencedHostFs). Any thread.
    std::set<std::string> stuck_names();

private:
    void create_all(const std::vector<const MdevPlan*>& creates, std::vector<MdevResult>& out);
    MdevResult remove(const MdevPlan& p, const HostUse& use);
    // 0, an errno, or kWriteStuck (then remembered under p's UUID, with its parent). Not
    // written when its journal entry cannot be stored (that errno, and *why says so).
    int write(const MdevPlan& p, const std::string& rel, const std::string& value,
              std::string* why);
    struct Stuck {
        std::string parent;
        std::shared_ptr<PendingWrite> write;
    };

    HostFs& fs_;
    std::atomic<std::chrono::milliseconds> timeout_;
    Journal* journal_;
    std::mutex m_;
    std::map<std::string, Stuck> stuck_;  // by mdev UUID
};

}  // namespace vfiod
