#include "service/service.hpp"

#include <spdlog/spdlog.h>

#include "core/plan_json.hpp"
#include "io/config_loader.hpp"

namespace vfiod {

namespace {

std::string join(const std::vector<std::string>& parts, const char* sep = ", ") {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += sep;
        out += p;
    }
    return out;
}

std::string addresses(const std::vector<PciAddress>& list) {
    std::vector<std::string> s;
    for (const auto& a : list)
        s.push_back(a.str());
    return join(s);
}

// "0000:01:00.0 e1000e→vfio-pci, 0000:01:00.1 snd_hda_intel→vfio-pci": what a log reader needs
// to know which functions moved where.
std::string describe_devices(const GroupPlan& gp) {
    std::vector<std::string> s;
    for (const auto& d : gp.devices) {
        std::string from = d.driver.empty() ? "(none)" : d.driver;
        if (!d.target || *d.target == d.driver)
            s.push_back(d.address.str() + " " + from);
        else
            s.push_back(d.address.str() + " " + from + "→" + *d.target);
    }
    return join(s);
}

}  // namespace

const char* to_string(GroupState s) {
    switch (s) {
    case GroupState::Bound: return "bound";
    case GroupState::Pending: return "pending";
    case GroupState::Refused: return "refused";
    case GroupState::Failed: return "failed";
    case GroupState::Released: return "released";
    }
    return "";
}

std::string group_object_path(unsigned id) { return "/org/vfiod1/group/" + std::to_string(id); }

std::string device_object_path(const PciAddress& a) {
    return "/org/vfiod1/device/" + a.object_path_element();
}

Service::Service(Sysfs& fs, ServiceOptions options) : fs_(fs), options_(std::move(options)) {}

Service::~Service() = default;

Mode Service::mode() const { return options_.force_observe ? Mode::Observe : config_.mode; }

bool Service::start() {
    ConfigResult r = load_config(fs_.root(), options_.config_file);
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("{}", e);
        return false;
    }
    config_ = std::move(*r.config);
    if (config_.files.empty())
        spdlog::info("no configuration file: the allowlist is empty, nothing to do");
    else
        spdlog::info("configuration {}: {} device entries, {} protect entries, mode {}",
                     join(config_.files), config_.devices.size(), config_.protects.size(),
                     to_string(mode()));
    reread();
    std::set<unsigned> all;
    for (const auto& g : plan_.groups)
        if (g.group)
            all.insert(*g.group);
    decide(all, false);
    if (!plan_.iommu && !plan_.groups.empty())
        spdlog::warn("the IOMMU is disabled: {} allowlisted function(s) cannot be passed through",
                     plan_.groups.size());
    publish();
    return true;
}

void Service::reread() {
    snapshot_ = read_snapshot(fs_);
    for (const auto& w : snapshot_.warnings)
        spdlog::debug("{}", w);
    plan_ = make_plan(snapshot_.topology, snapshot_.use, config_);
}

const GroupPlan* Service::group_plan(unsigned group) const {
    for (const auto& g : plan_.groups)
        if (g.group == group)
            return &g;
    return nullptr;
}

std::optional<unsigned> Service::group_of(const PciAddress& a) const {
    const PciFunction* fn = snapshot_.topology.find(a);
    return fn ? fn->iommu_group : std::nullopt;
}

void Service::handle_events(const std::set<PciAddress>& touched) {
    // A removed function is only in the old topology, an added one only in the new: ask both.
    std::set<unsigned> groups;
    for (const auto& a : touched)
        if (auto g = group_of(a))
            groups.insert(*g);
    reread();
    for (const auto& a : touched)
        if (auto g = group_of(a))
            groups.insert(*g);
    decide(groups, true);
    publish();
}

void Service::decide(const std::set<unsigned>& groups, bool from_events) {
    for (unsigned g : groups) {
        const GroupPlan* gp = group_plan(g);
        if (!gp) {
            forget_group(g);
            continue;
        }
        set_status(g, decide_group(*gp, from_events));
    }
}

Service::Status Service::decide_group(const GroupPlan& gp, bool from_events) {
    unsigned id = *gp.group;
    if (is_released(id))
        return {GroupState::Released, "", "", {}};
    switch (gp.action) {
    case Action::Bound:
        return {GroupState::Bound, "", "", {}};
    case Action::Refuse:
        if (mode() == Mode::Enforce)
            clear_early_overrides(gp);
        return {GroupState::Refused, to_string(gp.reason), join(gp.details, "; "), gp.blockers};
    case Action::Bind:
        break;
    }
    auto prev = status_.find(id);
    bool drifted = from_events && prev != status_.end() && prev->second.state == GroupState::Bound;
    if (drifted) {
        // Someone moved a function of a bound group back to a host driver. Re-assert once; a
        // second drift is a human (or a tool) meaning it, and fighting it would be a bind loop.
        spdlog::warn("group {}: drift: no longer bound ({})", id, describe_devices(gp));
        if (mode() == Mode::Enforce) {
            if (reasserted_.count(id))
                return {GroupState::Failed, "drift",
                        "drifted again after one re-assertion; use Bind to take it back", {}};
            reasserted_.insert(id);
            spdlog::warn("group {}: re-asserting the binding once", id);
        }
    }
    if (mode() == Mode::Observe)
        return {GroupState::Pending, "", "would bind " + describe_devices(gp), {}};
    return execute(gp);
}

Service::Status Service::execute(const GroupPlan& gp) {
    // Enforce mode: the executor lands here (see report); until then nothing is written.
    return {GroupState::Pending, "", "would bind " + describe_devices(gp), {}};
}

void Service::clear_early_overrides(const GroupPlan& gp) {
    (void)gp;
}

bool Service::is_released(unsigned group) const {
    (void)group;
    return false;
}

std::map<PciAddress, std::string> Service::originals(unsigned group) const {
    (void)group;
    return {};
}

void Service::set_status(unsigned group, Status s) {
    auto it = status_.find(group);
    if (it != status_.end() && it->second == s)
        return;
    const GroupPlan* gp = group_plan(group);
    std::string devices = gp ? describe_devices(*gp) : "";
    switch (s.state) {
    case GroupState::Bound:
    case GroupState::Released:
        spdlog::info("group {}: {} ({})", group, to_string(s.state), devices);
        break;
    case GroupState::Pending:
        spdlog::info("group {}: pending: {}", group, s.message);
        break;
    case GroupState::Refused:
        spdlog::warn("group {}: refused {} (blockers {}): {}", group, s.reason,
                     addresses(s.blockers), s.message);
        break;
    case GroupState::Failed:
        spdlog::error("group {}: failed {}: {} ({})", group, s.reason, s.message, devices);
        break;
    }
    status_[group] = std::move(s);
}

void Service::forget_group(unsigned group) {
    if (status_.erase(group))
        spdlog::info("group {}: gone (no allowlisted function left)", group);
    reasserted_.erase(group);
}

void Service::publish() {
    Inventory inv;
    inv.mode = to_string(mode());
    inv.iommu = plan_.iommu;
    for (const auto& gp : plan_.groups) {
        if (!gp.group)
            continue;
        unsigned id = *gp.group;
        auto st = status_.find(id);
        if (st == status_.end())
            continue;
        GroupInfo gi;
        gi.id = id;
        gi.state = st->second.state;
        gi.reason = st->second.reason;
        gi.blockers = st->second.blockers;
        auto orig = originals(id);
        for (const auto& d : gp.devices) {
            gi.devices.push_back(d.address);
            DeviceInfo di;
            di.address = d.address;
            di.vendor = d.vendor;
            di.device = d.device;
            di.class_code = d.class_code;
            di.driver = d.driver;
            auto o = orig.find(d.address);
            if (o != orig.end())
                di.original_driver = o->second;
            else if (!d.target || d.driver != *d.target)
                di.original_driver = d.driver;  // still on it: the host driver is the original
            di.group = id;
            if (const PciFunction* fn = snapshot_.topology.find(d.address))
                di.numa_node = fn->numa_node;
            di.resource_name = d.resource_name.value_or("");
            di.role = d.role;
            inv.devices[d.address] = std::move(di);
        }
        inv.groups[id] = std::move(gi);
    }
    if (inv == inventory_)
        return;
    inventory_ = std::move(inv);
    if (on_change_)
        on_change_(inventory_);
}

std::string Service::plan_json() const { return plan_to_json(plan_); }

OpResult Service::reload() {
    ConfigResult r = load_config(fs_.root(), options_.config_file);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("reload rejected: {}", e);
        spdlog::warn("reload rejected; the previous configuration stays in effect");
        return OpResult::error(OpResult::Code::Failed,
                               "configuration rejected, previous one kept: " + join(r.errors, "; "));
    }
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    Config before = std::move(config_);
    config_ = std::move(*r.config);
    std::set<unsigned> changed = groups_whose_entries_changed(before, config_);
    for (unsigned g : changed)
        reasserted_.erase(g);
    reasserted_.clear();
    std::set<unsigned> groups;
    for (const auto& [g, st] : status_)
        groups.insert(g);
    reread();
    for (const auto& gp : plan_.groups)
        if (gp.group)
            groups.insert(*gp.group);
    spdlog::info("configuration reloaded: {} device entries, {} protect entries, mode {}",
                 config_.devices.size(), config_.protects.size(), to_string(mode()));
    decide(groups, false);
    publish();
    return {};
}

std::set<unsigned> Service::groups_whose_entries_changed(const Config& before,
                                                         const Config& after) const {
    (void)before;
    (void)after;
    return {};
}

OpResult Service::bind(std::string_view address) {
    std::string err;
    auto addr = PciAddress::parse(address, &err);
    if (!addr)
        return OpResult::error(OpResult::Code::InvalidArgs, err);
    (void)addr;
    return OpResult::error(OpResult::Code::Failed, "not implemented yet");
}

OpResult Service::release(std::string_view address) {
    std::string err;
    auto addr = PciAddress::parse(address, &err);
    if (!addr)
        return OpResult::error(OpResult::Code::InvalidArgs, err);
    return OpResult::error(OpResult::Code::Failed, "not implemented yet");
}

}  // namespace vfiod
