// The Executor's SR-IOV half (DESIGN §11): a PF's VF count changed by the PfPlan's writes, each
// through the same timed write as a bind, journaled as the PF's own entry so a crash or a
// blocked write is settled on the next start.
#include "exec/executor.hpp"

#include <cerrno>

#include "core/pci_paths.hpp"
#include "core/strings.hpp"
#include "exec/journal_check.hpp"
#include "exec/write_text.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

using write_text::error_text;

// sriov_numvfs as the kernel shows it now; nullopt when the PF is gone, is no PF (an address
// reused after a hot-unplug), or shows something that is not a count.
std::optional<unsigned> read_numvfs(const HostFs& fs, const PciAddress& pf) {
    auto text = fs.read(pci_paths::sriov_numvfs_file(pf));
    auto n = text ? parse_int_attr(*text) : std::nullopt;  // the topology reader's parse
    if (!n || *n < 0 || *n > 0xffff)
        return std::nullopt;
    return static_cast<unsigned>(*n);
}

PfOutcome failed(const PciAddress& pf, Reason reason, std::string message) {
    return {PfState::Failed, reason, std::move(message), {pf}};
}

std::string change_text(const PfJournalEntry& e) {
    return "an interrupted change of " + e.pf.str() + "'s sriov_numvfs from " +
           std::to_string(e.from) + " to " + std::to_string(e.to);
}

}  // namespace

PfOutcome Executor::apply_pf(const PfPlan& plan) {
    if (plan.action == PfAction::Refuse)
        return {PfState::Refused, plan.reason, join(plan.details, "; "), plan.blockers};
    if (plan.action == PfAction::Ready)
        return {PfState::Ready, Reason::None, "", {}};
    if (auto held = pf_held(plan.address))
        return *held;
    PfJournalEntry entry{plan.address, plan.num_vfs, plan.wanted_vfs,
                         PfJournalEntry::Phase::Started};
    if (std::string err = store_pf(entry); !err.empty())
        return failed(plan.address, Reason::WriteFailed, err + "; nothing was written");
    return write_pf(plan.writes, plan.wanted_vfs, entry);
}

std::optional<PfOutcome> Executor::pf_held(const PciAddress& pf) {
    if (stuck_among({pf}).empty())
        return std::nullopt;
    return failed(pf, Reason::Stuck,
                  pf.str() + ": " + error_text(EBUSY) +
                      ": an earlier write is still blocked in the kernel; the PF is left alone "
                      "until it returns");
}

// The writes in order, then sriov_numvfs read back. A failed write is not rolled back: the
// kernel checks a store before acting on it, so the PF holds either the count it had or, after
// a "0" that went through, none; both are real states the next plan starts from, and writing
// the old count back would only destroy and re-create VFs once more. Only autoprobe goes back
// to 1: left at 0, no VF anyone makes later would reach a driver (pci_device_can_probe), and a
// refused PF is never written again. So the entry goes, except for a blocked write, whose
// outcome nobody knows yet: that entry stays, phase stuck.
PfOutcome Executor::write_pf(const std::vector<Write>& writes, unsigned to,
                             PfJournalEntry& entry) {
    const PciAddress pf = entry.pf;
    for (size_t i = 0; i < writes.size(); ++i) {
        const Write& w = writes[i];
        int err = timed_write(pf, w.path(), w.value);
        if (err == 0)
            continue;
        std::string what = write_text::writing(pf.str(), w);
        if (err != kStuck)
            return drop_pf(pf, failed(pf, Reason::WriteFailed,
                                      what + error_text(err) +
                                          "; the PF keeps the VF count the kernel shows" +
                                          autoprobe_back(pf, writes, i)));
        entry.phase = PfJournalEntry::Phase::Stuck;
        std::string message = what + "no answer within " +
                              std::to_string(timeout_.load().count()) +
                              " ms; left as it is (a blocked kernel write cannot be cancelled)";
        if (std::string store_err = store_pf(entry); !store_err.empty())
            message += "; " + store_err;
        return failed(pf, Reason::Stuck, message);
    }
    auto now = read_numvfs(fs_, pf);
    if (now != to)
        return drop_pf(pf, failed(pf, Reason::WriteFailed,
                                  pf.str() + ": verify: " + pci_paths::sriov_numvfs_file(pf) +
                                      " reads " + (now ? std::to_string(*now) : "nothing") +
                                      ", expected " + std::to_string(to)));
    return drop_pf(pf, {PfState::Ready, Reason::None, "", {}});
}

std::string Executor::autoprobe_back(const PciAddress& pf, const std::vector<Write>& writes,
                                     size_t failed) {
    bool turned_off = false;
    for (size_t i = 0; i < failed; ++i)
        turned_off = turned_off || (writes[i].kind == Write::Kind::SriovAutoprobe &&
                                    writes[i].value == "0");
    if (!turned_off)
        return "";
    const std::string file = pci_paths::sriov_autoprobe_file(pf);
    int err = timed_write(pf, file, "1");
    if (err == 0)
        return "; " + file + " set back to 1";
    return "; " + file + " could not be set back to 1: " +
           (err == kStuck ? std::string("the write blocked") : error_text(err));
}

std::string Executor::store_pf(const PfJournalEntry& entry) {
    if (!journal_)
        return "";
    int err = journal_->store_pf(entry);
    return err ? journal_->describe_pf_error(entry.pf, err) : "";
}

// Removes the PF's entry and hands `out` back, noting a removal that failed: the entry then
// stays, and the next start settles it as any interrupted change.
PfOutcome Executor::drop_pf(const PciAddress& pf, PfOutcome out) {
    if (!journal_)
        return out;
    if (int err = journal_->remove_pf(pf))
        out.message += (out.message.empty() ? "" : "; ") + journal_->describe_pf_error(pf, err);
    return out;
}

std::vector<PciAddress> Executor::unfinished_pfs(std::vector<std::string>* errors) const {
    std::vector<PciAddress> out;
    if (!journal_)
        return out;
    for (const auto& e : journal_->load_all_pfs(errors))
        out.push_back(e.pf);
    return out;
}

// An entry exists only while a change runs, so any entry found is unfinished. With an
// [[sriov]] entry still governing the PF, its plan, made from what the kernel shows now, takes
// the count where it should be, through 0 when needed; so the entry only goes. Without one,
// the PF goes back to the count it had, the entry kept until that is reached (a crash on the
// way back starts over from the same `from`).
std::optional<PfOutcome> Executor::reconcile_pf(const PciAddress& pf,
                                                std::optional<unsigned> wanted,
                                                const Config& config) {
    auto e = journal_ ? journal_->load_pf(pf) : std::nullopt;
    if (!e)
        return std::nullopt;
    if (auto held = pf_held(pf))
        return *held;
    auto now = read_numvfs(fs_, pf);
    // Read now, on this thread, right before the first write, as a group's entry is: the
    // entry may outlive the [[sriov]] entry that made it, or not be vfiod's at all.
    bool changes_count = !wanted && now && *now != e->from;
    if (auto problems = pf_entry_problems(*e, read_pf_entry_facts(fs_, *e), config, changes_count);
        !problems.empty()) {
        std::vector<PciAddress> blockers;
        std::string why = describe_problems(problems, &blockers);
        return drop_pf(pf, {PfState::Refused, Reason::None,
                            change_text(*e) + ": its entry " + journal_->pf_entry_path(pf) +
                                " was not acted on: nothing was written for it and it was "
                                "discarded: " + why,
                            blockers});
    }
    if (wanted) {
        // The change may have stopped between its writes with autoprobe still 0, and a plan
        // that finds the count right writes nothing: autoprobe goes back here.
        if (int err = timed_write(pf, pci_paths::sriov_autoprobe_file(pf), "1"); err == kStuck)
            return failed(pf, Reason::Stuck, change_text(*e) + ": " +
                                                 pci_paths::sriov_autoprobe_file(pf) +
                                                 " <- 1: no answer; the entry stays");
        return drop_pf(pf, {PfState::Ready, Reason::None,
                            change_text(*e) + ": its entry was dropped; the decision for its "
                                              "[[sriov]] entry (num_vfs = " +
                                std::to_string(*wanted) + ") follows",
                            {}});
    }
    if (!now)
        return drop_pf(pf, {PfState::Refused, Reason::None,
                            change_text(*e) + ": " + pci_paths::sriov_numvfs_file(pf) +
                                " cannot be read (the PF is gone or is no PF now); nothing was "
                                "written and the entry was discarded",
                            {pf}});
    std::vector<Write> back = sriov_writes(pf, *now, e->from);
    if (e->from == 0 || *now == e->from)  // sriov_writes leaves autoprobe as it is then
        back.push_back({Write::Kind::SriovAutoprobe, pf, "1"});
    PfOutcome out = write_pf(back, e->from, *e);
    if (out.state == PfState::Ready)
        out.message = change_text(*e) + ": back at " + std::to_string(e->from) +
                      " (no [[sriov]] entry governs it now)";
    return out;
}

}  // namespace vfiod
