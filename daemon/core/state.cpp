#include "core/state.hpp"

namespace vfiod {

GroupState planned_state(Action a) {
    switch (a) {
    case Action::Bind: return GroupState::Pending;
    case Action::Bound: return GroupState::Bound;
    case Action::Refuse: return GroupState::Refused;
    case Action::Release: return GroupState::Pending;
    case Action::Released: return GroupState::Released;
    }
    return GroupState::Failed;  // not reached: every Action is listed above
}

GroupState published_state(Outcome o) {
    switch (o) {
    case Outcome::Bound: return GroupState::Bound;
    case Outcome::Released: return GroupState::Released;
    case Outcome::Refused: return GroupState::Refused;
    case Outcome::Failed: return GroupState::Failed;
    case Outcome::Stuck: return GroupState::Failed;
    case Outcome::RolledBack: return GroupState::Pending;
    }
    return GroupState::Failed;
}

PfState planned_state(PfAction a) {
    switch (a) {
    case PfAction::Create: return PfState::Pending;
    case PfAction::Ready: return PfState::Ready;
    case PfAction::Refuse: return PfState::Refused;
    }
    return PfState::Failed;  // not reached: every PfAction is listed above
}

MdevState planned_state(MdevAction a, Reason r) {
    switch (a) {
    case MdevAction::Ready: return MdevState::Ready;
    case MdevAction::Create:
    case MdevAction::Remove: return MdevState::Pending;
    case MdevAction::Refuse: return r == Reason::NoParent ? MdevState::Failed : MdevState::Refused;
    case MdevAction::Foreign: return MdevState::Foreign;
    }
    return MdevState::Failed;
}

const char* to_string(Action a) {
    switch (a) {
    case Action::Bind: return "bind";
    case Action::Bound: return "bound";
    case Action::Refuse: return "refuse";
    case Action::Release: return "release";
    case Action::Released: return "released";
    }
    return "?";
}

const char* to_string(PfAction a) {
    switch (a) {
    case PfAction::Create: return "create";
    case PfAction::Ready: return "ready";
    case PfAction::Refuse: return "refuse";
    }
    return "?";
}

const char* to_string(MdevAction a) {
    switch (a) {
    case MdevAction::Create: return "create";
    case MdevAction::Ready: return "ready";
    case MdevAction::Remove: return "remove";
    case MdevAction::Refuse: return "refuse";
    case MdevAction::Foreign: return "foreign";
    }
    return "?";
}

const char* to_string(MdevState s) {
    switch (s) {
    case MdevState::Ready: return "ready";
    case MdevState::Pending: return "pending";
    case MdevState::Refused: return "refused";
    case MdevState::Failed: return "failed";
    case MdevState::Foreign: return "foreign";
    }
    return "?";
}

const char* to_string(Reason r) {
    switch (r) {
    case Reason::None: return "";
    case Reason::NoIommu: return "no-iommu";
    case Reason::Protected: return "protected";
    case Reason::InUseStorage: return "in-use-storage";
    case Reason::InUseNetwork: return "in-use-network";
    case Reason::InUseDevice: return "in-use-device";
    case Reason::SriovPf: return "sriov-pf";
    case Reason::MdevParent: return "mdev-parent";
    case Reason::BootVga: return "boot-vga";
    case Reason::Companion: return "companion";
    case Reason::InUseVf: return "in-use-vf";
    case Reason::VfsExceedTotal: return "vfs-exceed-total";
    case Reason::MdevUnavailable: return "mdev-unavailable";
    case Reason::NoParent: return "no-parent";
    case Reason::UnknownType: return "unknown-type";
    case Reason::InUseMdev: return "in-use-mdev";
    case Reason::InUseVfio: return "in-use-vfio";
    case Reason::VfioUnavailable: return "vfio-unavailable";
    case Reason::WriteFailed: return "write-failed";
    case Reason::Stuck: return "stuck";
    case Reason::Drift: return "drift";
    }
    return "?";
}

const char* to_string(Outcome o) {
    switch (o) {
    case Outcome::Bound: return "bound";
    case Outcome::Released: return "released";
    case Outcome::Refused: return "refused";
    case Outcome::Failed: return "failed";
    case Outcome::Stuck: return "stuck";
    case Outcome::RolledBack: return "rolled-back";
    }
    return "?";
}

const char* to_string(GroupState s) {
    switch (s) {
    case GroupState::Bound: return "bound";
    case GroupState::Pending: return "pending";
    case GroupState::Refused: return "refused";
    case GroupState::Failed: return "failed";
    case GroupState::Released: return "released";
    }
    return "?";
}

const char* to_string(PfState s) {
    switch (s) {
    case PfState::Ready: return "ready";
    case PfState::Pending: return "pending";
    case PfState::Refused: return "refused";
    case PfState::Failed: return "failed";
    }
    return "?";
}

std::optional<Reason> parse_reason(std::string_view text) {
    // Reason::Drift is the last enumerator: walking up to it covers the closed set.
    for (int i = 0; i <= static_cast<int>(Reason::Drift); ++i)
        if (text == to_string(static_cast<Reason>(i)))
            return static_cast<Reason>(i);
    return std::nullopt;
}

std::optional<GroupState> parse_group_state(std::string_view text) {
    for (GroupState s : {GroupState::Bound, GroupState::Pending, GroupState::Refused,
                         GroupState::Failed, GroupState::Released})
        if (text == to_string(s))
            return s;
    return std::nullopt;
}

std::optional<PfState> parse_pf_state(std::string_view text) {
    for (PfState s : {PfState::Ready, PfState::Pending, PfState::Refused, PfState::Failed})
        if (text == to_string(s))
            return s;
    return std::nullopt;
}

std::optional<MdevState> parse_mdev_state(std::string_view text) {
    for (MdevState s : {MdevState::Ready, MdevState::Pending, MdevState::Refused,
                        MdevState::Failed, MdevState::Foreign})
        if (text == to_string(s))
            return s;
    return std::nullopt;
}

}  // namespace vfiod
