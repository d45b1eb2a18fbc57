#include "fake_kernel.hpp"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "core/pci_address.hpp"

namespace vfiod::test {

namespace {

const std::string kDevices = "sys/bus/pci/devices/";
const std::string kDrivers = "sys/bus/pci/drivers/";

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// sysfs stores see the caller's bytes; the PCI core compares names up to a trailing newline
// (sysfs_streq) and driver_override keeps what comes before the first newline.
std::string first_line(const std::string& v) { return v.substr(0, v.find('\n')); }

}  // namespace

FakeKernel::FakeKernel(FakeTree& tree)
    : KernelHostFs(tree.root()), tree_(tree), sriov_(tree, *this), mdev_(tree, *this) {
    // vfio drivers match no device by ID table: a function found on one only got there
    // through an override (or new_id), so it has no native driver the fake could know.
    for (const auto& bdf : list("sys/bus/pci/devices")) {
        std::string drv = driver_of(bdf);
        native_[bdf] = drv.find("vfio") == std::string::npos ? drv : "";
    }
    // A VF found driverless (created with autoprobe 0) still matches its PF's VF driver.
    for (auto& [bdf, drv] : native_)
        if (std::string pf = sriov_.physfn_of(bdf); drv.empty() && !pf.empty())
            drv = sriov_.vf_driver(pf);
}

FakeKernel::~FakeKernel() {
    std::unique_lock lock(m_);
    released_ = true;
    closing_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return in_flight_ == 0; });
}

void FakeKernel::set_native_driver(const std::string& bdf, const std::string& driver) {
    std::lock_guard lock(m_);
    native_[bdf] = driver;
}

void FakeKernel::fail_probe(const std::string& bdf, const std::string& driver) {
    std::lock_guard lock(m_);
    failing_probes_[bdf].push_back(driver);
}

void FakeKernel::heal_probe(const std::string& bdf, const std::string& driver) {
    std::lock_guard lock(m_);
    std::erase(failing_probes_[bdf], driver);
}

void FakeKernel::fail_path(const std::string& rel, int err, unsigned nth) {
    std::lock_guard lock(m_);
    path_faults_[rel][path_counts_[rel] + nth] = err;
}

void FakeKernel::fail_step(unsigned k, int err) {
    std::lock_guard lock(m_);
    step_faults_[k] = err;
}

void FakeKernel::block_path(const std::string& rel) {
    std::lock_guard lock(m_);
    blocked_paths_.push_back(rel);
}

void FakeKernel::unblock() {
    std::lock_guard lock(m_);
    released_ = true;
    cv_.notify_all();
}

void FakeKernel::before_step(std::function<void(unsigned, const std::string&)> hook) {
    std::lock_guard lock(m_);
    hook_ = std::move(hook);
}

void FakeKernel::remove_function(const std::string& bdf) {
    std::unique_lock lock(m_);
    remove_device(bdf);
    deliver_uevents(lock);
}

void FakeKernel::hot_add(const FakeTree::Function& fn) {
    std::unique_lock lock(m_);
    if (!fn.driver.empty())
        tree_.add_driver(fn.driver);
    add_device(fn, fn.driver);
    probe_new_device(fn.address);
    deliver_uevents(lock);
}

namespace {

// The three files as 6.1 prints them (drivers/pci/pcie/aer.c): one line per error bit, then the
// total. Only RxErr and CmpltTO are counted here, the errors the VM test injects.
void write_aer_files(FakeTree& tree, const std::string& dev, const AerTotalsText& t) {
    tree.write_file(dev + "/aer_dev_correctable",
                    "RxErr " + std::to_string(t.cor) + "\nBadTLP 0\nBadDLLP 0\nRollover 0\n"
                    "Timeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR " +
                    std::to_string(t.cor) + "\n");
    tree.write_file(dev + "/aer_dev_nonfatal",
                    "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO " +
                    std::to_string(t.nonfatal) + "\nCmpltAbrt 0\nUnxCmplt 0\n"
                    "TOTAL_ERR_NONFATAL " + std::to_string(t.nonfatal) + "\n");
    tree.write_file(dev + "/aer_dev_fatal", "Undefined 0\nDLP " + std::to_string(t.fatal) +
                                                "\nSDES 0\nTOTAL_ERR_FATAL " +
                                                std::to_string(t.fatal) + "\n");
}

}  // namespace

void FakeKernel::add_aer(const std::string& bdf) {
    std::lock_guard lock(m_);
    aer_[bdf] = {};
    write_aer_files(tree_, tree_.devpath(bdf), aer_[bdf]);
}

void FakeKernel::lacks_error_handlers(const std::string& driver) {
    std::lock_guard lock(m_);
    no_error_handlers_.insert(driver);
}

void FakeKernel::inject_aer(const std::string& bdf, AerKind kind, bool recovers) {
    std::unique_lock lock(m_);
    auto it = aer_.find(bdf);
    if (it == aer_.end())
        return;  // aer_inject refuses a function without AER (EPROTONOSUPPORT)
    if (kind == AerKind::Correctable)
        ++it->second.cor;
    else if (kind == AerKind::NonFatal)
        ++it->second.nonfatal;
    write_aer_files(tree_, tree_.devpath(bdf), it->second);
    if (kind == AerKind::Correctable)
        return;
    // Every function below the port: the devices in the same directory as bdf's.
    const std::string dev = tree_.devpath(bdf);
    std::vector<std::string> below;
    for (const auto& e : std::filesystem::directory_iterator(root() + "/" +
                                                             dev.substr(0, dev.rfind('/'))))
        if (PciAddress::parse(e.path().filename().string()))
            below.push_back(e.path().filename().string());
    std::sort(below.begin(), below.end());
    auto recovery = [&](const std::string& fn, const char* event, const char* online) {
        pci_uevent("change", fn);
        uevents_.back().env.emplace_back("ERROR_EVENT", event);
        uevents_.back().env.emplace_back("DEVICE_ONLINE", online);
    };
    bool handlers = true;
    for (const auto& fn : below) {
        std::string drv = driver_of(fn);
        if (no_error_handlers_.count(drv))
            handlers = false;
        else
            recovery(fn, "BEGIN_RECOVERY", "0");
    }
    for (const auto& fn : below) {
        if (recovers && handlers)
            recovery(fn, "SUCCESSFUL_RECOVERY", "1");
        else
            recovery(fn, "FAILED_RECOVERY", "0");
    }
    deliver_uevents(lock);
}

void FakeKernel::lose_device(const std::string& bdf) {
    std::lock_guard lock(m_);
    tree_.write_file(tree_.devpath(bdf) + "/config", std::string(64, '\xff'));
}

void FakeKernel::on_uevent(std::function<void(const std::string&, const std::string&)> sink) {
    std::lock_guard lock(m_);
    uevent_sink_ = std::move(sink);
}

void FakeKernel::on_device_uevent(std::function<void(const Uevent&)> sink) {
    std::lock_guard lock(m_);
    device_sink_ = std::move(sink);
}

void FakeKernel::register_mdev_parent(const MdevParentSpec& spec, bool announce) {
    std::unique_lock lock(m_);
    mdev_.register_parent(spec, announce);
    deliver_uevents(lock);
}

void FakeKernel::unregister_mdev_parent(const std::string& name) {
    std::unique_lock lock(m_);
    mdev_.unregister_parent(name);
    deliver_uevents(lock);
}

void FakeKernel::open_mdev_device(const std::string& uuid) {
    std::lock_guard lock(m_);
    mdev_.open_device(uuid);
}

void FakeKernel::close_mdev_device(const std::string& uuid) {
    std::lock_guard lock(m_);
    mdev_.close_device(uuid);
    cv_.notify_all();
}

void FakeKernel::fail_mdev_probe(const std::string& parent, int err) {
    std::lock_guard lock(m_);
    mdev_.fail_probe(parent, err);
}

void FakeKernel::set_vf_driver(const std::string& pf, const std::string& driver) {
    std::lock_guard lock(m_);
    sriov_.set_vf_driver(pf, driver);
}

void FakeKernel::lacks_sriov_configure(const std::string& driver) {
    std::lock_guard lock(m_);
    sriov_.lacks_sriov_configure(driver);
}

void FakeKernel::add_device(const FakeTree::Function& fn, const std::string& native_driver) {
    FakeTree::Function driverless = fn;
    driverless.driver.clear();
    tree_.add_function(driverless);
    native_[fn.address] = native_driver;
    uevent("add", fn.address);
}

void FakeKernel::probe_new_device(const std::string& bdf) { probe(bdf); }

void FakeKernel::remove_device(const std::string& bdf) {
    if (!device_exists(bdf))
        return;
    // A PF's VFs go first, as when its slot powers off (the bus's newest devices first).
    auto entries = list(kDevices + bdf);
    for (auto e = entries.rbegin(); e != entries.rend(); ++e)
        if (starts_with(*e, "virtfn"))
            remove_device(link_name(kDevices + bdf + "/" + *e).value_or(""));
    detach(bdf);
    std::string dir = tree_.devpath(bdf);
    tree_.remove_function(bdf);
    pci_uevent("remove", bdf, dir);
}

void FakeKernel::uevent(const std::string& action, const std::string& bdf) {
    pci_uevent(action, bdf);
}

// As the PCI core's uevent has it: DRIVER while bound, the slot name.
void FakeKernel::pci_uevent(const std::string& action, const std::string& bdf, std::string dir) {
    if (dir.empty())
        dir = tree_.devpath(bdf);
    Uevent ev{action, dir.empty() ? "" : dir.substr(3), "pci", {}};
    if (std::string drv = driver_of(bdf); !drv.empty())
        ev.env.emplace_back("DRIVER", drv);
    ev.env.emplace_back("PCI_SLOT_NAME", bdf);
    uevents_.push_back(std::move(ev));
}

void FakeKernel::raise(Uevent ev) { uevents_.push_back(std::move(ev)); }

std::string FakeKernel::native_driver(const std::string& bdf) const {
    auto it = native_.find(bdf);
    return it == native_.end() ? "" : it->second;
}

void FakeKernel::attach(const std::string& bdf, const std::string& driver) {
    tree_.bind(bdf, driver);
    uevent("bind", bdf);
}

void FakeKernel::detach(const std::string& bdf) {
    if (driver_of(bdf).empty())
        return;
    tree_.unbind(bdf);
    uevent("unbind", bdf);
}

void FakeKernel::deliver_uevents(std::unique_lock<std::mutex>& lock) {
    auto events = std::exchange(uevents_, {});
    auto sink = uevent_sink_;
    auto device_sink = device_sink_;
    if ((!sink && !device_sink) || events.empty())
        return;
    lock.unlock();
    for (const auto& ev : events) {
        if (sink && ev.subsystem == "pci")
            sink(ev.action, ev.get("PCI_SLOT_NAME"));
        if (device_sink)
            device_sink(ev);
    }
    lock.lock();
}

std::vector<FakeKernel::Record> FakeKernel::writes() const {
    std::lock_guard lock(m_);
    return records_;
}

unsigned FakeKernel::blocked_now() const {
    std::lock_guard lock(m_);
    return blocked_;
}

int FakeKernel::write(std::string_view rel_view, std::string_view value_view) {
    std::string rel(rel_view), value(value_view);
    std::unique_lock lock(m_);
    ++in_flight_;
    unsigned k = ++steps_;
    unsigned nth = ++path_counts_[rel];
    if (auto hook = hook_) {
        lock.unlock();  // the hook may remove a device, which takes the lock
        hook(k, rel);
        lock.lock();
    }
    bool blocks = false;
    for (const auto& p : blocked_paths_)
        blocks = blocks || p == rel;
    if (blocks && !released_) {
        ++blocked_;
        // As on 6.1, the blocked store holds the device lock: reading the function's attributes
        // (driver_override's show() takes that lock) blocks too, until the store returns.
        std::string fn = function_of_write(rel, value);
        blocked_fns_.insert(fn);
        cv_.wait(lock, [&] { return released_; });
        blocked_fns_.erase(blocked_fns_.find(fn));
        --blocked_;
    }
    int result;
    auto path_fault = path_faults_.find(rel);
    if (step_faults_.count(k))
        result = step_faults_[k];
    else if (path_fault != path_faults_.end() && path_fault->second.count(nth))
        result = path_fault->second[nth];
    else
        result = apply(rel, value);
    // An mdev's remove while a VM holds its device waits in the kernel (vfio asks the user to
    // let go) and ends once the device is closed.
    if (std::string uuid = std::exchange(mdev_waits_, {}); !uuid.empty()) {
        ++blocked_;
        cv_.wait(lock, [&] { return closing_ || !mdev_.is_open(uuid); });
        --blocked_;
        mdev_.finish_remove(uuid);
    }
    records_.push_back({rel, value, result});
    deliver_uevents(lock);
    --in_flight_;
    cv_.notify_all();
    return result;
}

std::string FakeKernel::function_of_write(const std::string& rel, const std::string& value) {
    if (starts_with(rel, kDevices)) {
        std::string rest = rel.substr(kDevices.size());
        return rest.substr(0, rest.find('/'));
    }
    return first_line(value);  // drivers/<name>/unbind, bind, drivers_probe name the function
}

std::optional<std::string> FakeKernel::read(std::string_view rel, size_t max_bytes,
                                            std::string* why, const Dir* in) const {
    // The function an attribute belongs to: the path's last component that is a PCI address.
    std::string owner;
    std::string_view rest = rel;
    while (!rest.empty()) {
        auto slash = rest.find('/');
        std::string_view part = rest.substr(0, slash);
        if (PciAddress::parse(part))
            owner = std::string(part);
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    }
    if (!owner.empty()) {
        std::unique_lock lock(m_);
        if (blocked_fns_.count(owner) && !released_) {
            ++reads_blocked_;
            ++in_flight_;
            cv_.wait(lock, [&] { return released_; });
            --in_flight_;
            cv_.notify_all();
        }
    }
    // create and remove have no show(): sysfs refuses to open them for reading.
    if (rel.ends_with("/create") || rel.ends_with("/remove")) {
        auto canonical = resolve(rel);
        std::lock_guard lock(m_);
        if (canonical && mdev_.write_only(*canonical)) {
            if (why)
                *why = "Permission denied";
            return std::nullopt;
        }
    }
    return KernelHostFs::read(rel, max_bytes, why, in);
}

unsigned FakeKernel::reads_blocked() const {
    std::lock_guard lock(m_);
    return reads_blocked_;
}

// Called with m_ held: one kernel-side change at a time, as the device lock gives.
int FakeKernel::apply(const std::string& rel, const std::string& value) {
    // sysfs never calls an attribute's store() for a 0-byte write: nothing changes.
    if (value.empty())
        return 0;
    if (auto r = mdev_store(rel, value))
        return *r;
    const std::string arg = first_line(value);
    if (rel == "sys/bus/pci/drivers_probe")
        return probe(arg);
    if (starts_with(rel, kDevices)) {
        std::string rest = rel.substr(kDevices.size());
        std::string bdf = rest.substr(0, rest.find('/'));
        std::string attr = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
        if (!device_exists(bdf))
            return ENOENT;  // open() of an attribute of a vanished device
        if (attr == "driver_override") {
            if (value.size() >= 4095)
                return EINVAL;
            // A lone newline (or nothing before the first one) clears the override.
            // Written literally, "(null)" is an override naming a driver that does not exist: it
            // reads back like "no override" but lets nothing bind.
            if (arg == "(null)")
                literal_null_.insert(bdf);
            else
                literal_null_.erase(bdf);
            std::string dir = tree_.devpath(bdf);
            tree_.write_file(dir + "/driver_override", (arg.empty() ? "(null)" : arg) + "\n");
            return 0;
        }
        if (attr == "driver/unbind") {
            std::string drv = driver_of(bdf);
            return drv.empty() ? ENOENT : unbind_from(arg, drv);
        }
        if (starts_with(attr, "sriov_") && exists(rel))
            if (auto r = sriov_.store(bdf, attr, value))
                return *r;
    } else if (starts_with(rel, kDrivers)) {
        std::string rest = rel.substr(kDrivers.size());
        std::string drv = rest.substr(0, rest.find('/'));
        if (!exists(kDrivers + drv))
            return ENOENT;
        if (ends_with(rel, "/unbind"))
            return unbind_from(arg, drv);
        if (ends_with(rel, "/bind"))
            return bind_to(arg, drv);
    }
    if (!exists(rel))
        return ENOENT;
    return KernelHostFs::write(rel, value);  // any other attribute: store the bytes
}

std::optional<int> FakeKernel::mdev_store(const std::string& rel, const std::string& value) {
    // Only the paths the model knows end so: a type's create and its attributes, an mdev's
    // remove. Others are not resolved, so PCI writes cost what they did.
    static const char* const kNames[] = {"/create", "/remove", "/available_instances", "/name",
                                         "/device_api", "/description"};
    bool candidate = false;
    for (const char* n : kNames)
        candidate = candidate || rel.ends_with(n);
    if (!candidate)
        return std::nullopt;
    auto canonical = resolve(rel);
    if (!canonical)
        return std::nullopt;
    return mdev_.store(*canonical, value, &mdev_waits_);
}

bool FakeKernel::device_exists(const std::string& bdf) const {
    return PciAddress::parse(bdf).has_value() && exists(kDevices + bdf);
}

std::string FakeKernel::driver_of(const std::string& bdf) const {
    return link_name(kDevices + bdf + "/driver").value_or("");
}

std::string FakeKernel::override_of(const std::string& bdf) const {
    // KernelHostFs::read: this runs inside the store, which holds the lock read() would wait for.
    std::string v = KernelHostFs::read(kDevices + bdf + "/driver_override").value_or("");
    return v == "(null)" && !literal_null_.count(bdf) ? "" : v;
}

// drivers_probe: ENODEV only when there is no such device; otherwise it succeeds whether or not
// a driver attached (the probe's own failure is only logged).
int FakeKernel::probe(const std::string& bdf) {
    if (!device_exists(bdf))
        return ENODEV;
    if (!driver_of(bdf).empty())
        return 0;
    std::string ov = override_of(bdf);
    std::string candidate = ov.empty() ? native_[bdf] : ov;
    if (candidate.empty() || !exists(kDrivers + candidate) || !sriov_.may_probe(bdf, !ov.empty()))
        return 0;
    for (const auto& d : failing_probes_[bdf])
        if (d == candidate)
            return 0;
    attach(bdf, candidate);
    return 0;
}

// bind: ENODEV unless the driver may take the device (driver_override decides when set), EBUSY
// when it already has a driver.
int FakeKernel::bind_to(const std::string& bdf, const std::string& driver) {
    if (!device_exists(bdf))
        return ENODEV;
    std::string ov = override_of(bdf);
    bool matches = ov.empty() ? native_[bdf] == driver : ov == driver;
    if (!matches)
        return ENODEV;
    if (!driver_of(bdf).empty())
        return EBUSY;
    // A VF its PF keeps from autoprobing refuses in its probe, like a failing probe.
    if (!sriov_.may_probe(bdf, !ov.empty()))
        return ENODEV;
    for (const auto& d : failing_probes_[bdf])
        if (d == driver)
            return ENODEV;
    attach(bdf, driver);
    return 0;
}

int FakeKernel::unbind_from(const std::string& bdf, const std::string& driver) {
    if (!device_exists(bdf) || driver_of(bdf) != driver)
        return ENODEV;
    detach(bdf);
    return 0;
}

}  // namespace vfiod::test
