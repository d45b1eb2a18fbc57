#include "exec/mdev_writer.hpp"

#include <cerrno>
#include <cstring>

#include "io/mdev_reader.hpp"
#include "io/proc_fds.hpp"
#include "io/vfio_use.hpp"

namespace vfiod {

namespace {

std::string failed(const std::string& rel, const std::string& value, int err) {
    return "writing '" + value + "' to " + rel + ": " +
           (err == kWriteStuck ? std::string("blocked") : std::strerror(err));
}

MdevResult result(const MdevPlan& p, Reason r, std::string message) {
    return {p.uuid, p.action, r, std::move(message)};
}

}  // namespace

int MdevWriter::write(const MdevPlan& p, const std::string& rel, const std::string& value,
                      std::string* why) {
    MdevJournalEntry entry{p.uuid, p.parent, p.type, p.action == MdevAction::Create,
                           MdevJournalEntry::Phase::Started};
    if (journal_)
        if (int err = journal_->store_mdev(entry)) {
            *why = "not written: journal " + journal_->mdev_entry_path(p.uuid) + ": " +
                   std::strerror(err);
            return err;
        }
    std::shared_ptr<PendingWrite> left;
    const int err = write_within(fs_, rel, value, timeout_.load(), &left);
    if (err == kWriteStuck) {
        std::lock_guard lock(m_);
        stuck_[p.uuid] = {p.parent, left};
    }
    if (!journal_)
        return err;
    // An entry this cannot update or remove is settled at the next start, as a crash's is.
    entry.phase = MdevJournalEntry::Phase::Stuck;
    (void)(err == kWriteStuck ? journal_->store_mdev(entry) : journal_->remove_mdev(p.uuid));
    return err;
}

bool MdevWriter::stuck(const std::string& uuid) {
    std::lock_guard lock(m_);
    auto it = stuck_.find(uuid);
    if (it == stuck_.end())
        return false;
    if (!it->second.write->finished())
        return true;
    stuck_.erase(it);
    return false;
}

std::set<std::string> MdevWriter::stuck_names() {
    std::lock_guard lock(m_);
    std::erase_if(stuck_, [](const auto& kv) { return kv.second.write->finished(); });
    std::set<std::string> out;
    for (const auto& [uuid, s] : stuck_) {
        out.insert(uuid);
        out.insert(s.parent);
    }
    return out;
}

void MdevWriter::create_all(const std::vector<const MdevPlan*>& creates,
                            std::vector<MdevResult>& out) {
    const MdevPlan& first = *creates.front();
    // Read again right before (that file alone): an earlier pair on the parent may have taken
    // the budget.
    const unsigned avail = read_mdev_available(fs_, first.parent, first.type, nullptr).value_or(0);
    if (avail < creates.size()) {
        for (const MdevPlan* p : creates)
            out.push_back(result(*p, Reason::MdevUnavailable,
                                 first.parent + " type " + first.type + ": " +
                                     std::to_string(creates.size()) + " to create, " +
                                     std::to_string(avail) +
                                     " available_instances now; none of them is created"));
        return;
    }
    bool stop = false;
    for (const MdevPlan* p : creates) {
        if (stop) {
            out.push_back(result(*p, Reason::WriteFailed, "not written: an earlier create failed"));
            continue;
        }
        const MdevWrite w = p->writes().at(0);
        std::string why;
        const int err = write(*p, w.path, w.value, &why);
        if (why.empty() && (err == 0 || err == EEXIST)) {
            out.push_back(result(*p, Reason::None, ""));
            continue;
        }
        stop = true;
        out.push_back(result(*p, err == kWriteStuck ? Reason::Stuck : Reason::WriteFailed,
                             why.empty() ? failed(w.path, w.value, err) : why));
    }
}

MdevResult MdevWriter::remove(const MdevPlan& p, const HostUse& use) {
    if (auto held = use.mdevs.find(p.uuid); held != use.mdevs.end() && !held->second.empty())
        return result(p, Reason::InUseMdev, held->second.front());
    if (stuck(p.uuid))
        return result(p, Reason::Stuck, "an earlier remove of it is still blocked");
    const MdevWrite w = p.writes().at(0);
    std::string why;
    const int err = write(p, w.path, w.value, &why);
    if (why.empty() && (err == 0 || err == ENOENT))  // ENOENT: it is gone already
        return result(p, Reason::None, "");
    return result(p, err == kWriteStuck ? Reason::Stuck : Reason::WriteFailed,
                  why.empty() ? failed(w.path, w.value, err) : why);
}

std::vector<MdevResult> MdevWriter::apply(const std::vector<MdevPlan>& pair) {
    std::vector<const MdevPlan*> creates, removes;
    MdevHost held;  // the mdevs to remove, as read_mdev_use looks them up
    for (const MdevPlan& p : pair) {
        if (p.action == MdevAction::Create)
            creates.push_back(&p);
        if (p.action == MdevAction::Remove) {
            removes.insert(removes.begin(), &p);  // highest index first
            held.mdevs[p.uuid] = Mdev{p.parent, p.type, p.group, ""};
        }
    }
    std::vector<MdevResult> out;
    if (!creates.empty())
        create_all(creates, out);
    if (removes.empty())
        return out;
    HostUse use;
    read_mdev_use(fs_, held, scan_open_nodes(fs_), &use);
    for (const MdevPlan* p : removes)
        out.push_back(remove(*p, use));
    return out;
}

}  // namespace vfiod
