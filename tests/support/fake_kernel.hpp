// A HostFs whose writes behave as Linux 6.1's PCI core does on a FakeTree: driver_override decides
// which driver a probe may attach, unbind drops the driver link, bind/probe report the kernel's
// errors, a PF's sriov_numvfs creates and removes VFs (fake_sriov), an mdev parent's create and an
// mdev's remove make and remove mediated devices (fake_mdev). Faults (an errno, a removal, a write
// that blocks) can be injected per path and step. The kernel's own changes (add, remove, bind,
// unbind, change) raise uevents, handed to the sinks a test sets.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_mdev.hpp"
#include "fake_sriov.hpp"
#include "fake_tree.hpp"
#include "io/host_fs.hpp"

namespace vfiod::test {

// A function's AER counts, as its aer_dev_* files show them.
struct AerTotalsText {
    unsigned long cor = 0, nonfatal = 0, fatal = 0;
};

class FakeKernel : public KernelHostFs, private FakePciCore, private FakeMdevCore {
public:
    // Each function's native driver (what its ID tables match without an override) starts as the
    // driver it is bound to now.
    explicit FakeKernel(FakeTree& tree);
    // Lets blocked writes return and waits for them, so no worker outlives the tree.
    ~FakeKernel() override;

    // What a probe without an override attaches to bdf ("" for nothing).
    void set_native_driver(const std::string& bdf, const std::string& driver);
    // A probe of `driver` on bdf fails (the driver's probe() returns an error, as when the
    // hardware does not answer): the kernel logs it and drivers_probe still succeeds.
    void fail_probe(const std::string& bdf, const std::string& driver);
    // Undoes fail_probe(): the hardware answers again.
    void heal_probe(const std::string& bdf, const std::string& driver);

    // The nth write to rel from now on (1 = the next) fails with err and changes nothing.
    void fail_path(const std::string& rel, int err, unsigned nth = 1);
    // The kth write counted from construction (1-based) fails with err and changes nothing.
    void fail_step(unsigned k, int err);
    // Writes to rel block (as an unbind does while a driver waits for its users) until
    // unblock(); then they complete normally. While one blocks, reads of the same function's
    // attribute files block too (6.1: driver_override's show() takes the device lock the
    // blocked store holds); reads_blocked() counts them, so a test can tell who read.
    void block_path(const std::string& rel);
    void unblock();
    // Called on the writing thread before the kth write takes effect (k counts every write),
    // e.g. to remove the device mid-operation or to snapshot the tree.
    void before_step(std::function<void(unsigned k, const std::string& rel)> hook);

    // Surprise removal, through the kernel's lock like any other change: a PF's VFs go first;
    // unbind and remove uevents.
    void remove_function(const std::string& bdf);
    // Hot-plug: fn appears driverless (add uevent) and is probed like any new device, fn.driver
    // being its native driver, registered if it is not (udev loading its module).
    void hot_add(const FakeTree::Function& fn);

    // Receives every uevent from now on (action, BDF), outside the kernel's lock, on the thread
    // whose write or call raised it, after the change (the whole write) is done; e.g. a
    // ScriptedEvents' send. Without a sink, uevents are dropped.
    void on_uevent(std::function<void(const std::string& action, const std::string& bdf)> sink);
    // Receives every uevent of every subsystem from now on, as a udev monitor without a
    // subsystem filter would (an mdev's, its vfio group's, a virtual parent's class device's,
    // a PCI function's), in the order raised; same thread and timing as on_uevent's.
    void on_device_uevent(std::function<void(const Uevent&)> sink);

    // SR-IOV (see FakeSriov): the driver new VFs of pf match, and a driver without
    // sriov_configure.
    void set_vf_driver(const std::string& pf, const std::string& driver);
    void lacks_sriov_configure(const std::string& driver);

    // Mediated devices (see FakeMdev): a parent driver registers (its module loads) or goes,
    // with their uevents; announce false: it was registered before this kernel started (no
    // uevent, its mdevs in the tree adopted).
    void register_mdev_parent(const MdevParentSpec& spec, bool announce = true);
    void unregister_mdev_parent(const std::string& name);
    // A VM opens or closes an mdev's device (VFIO_GROUP_GET_DEVICE_FD): a remove written while it
    // is open waits until it is closed (blocked_now() counts it). Holding the group's node alone
    // (FakeTree::hold_open) does not make a remove wait.
    void open_mdev_device(const std::string& uuid);
    void close_mdev_device(const std::string& uuid);
    // The parent driver's probe of new mdevs fails with err (0: it works again).
    void fail_mdev_probe(const std::string& parent, int err);

    // PCIe AER (DESIGN §13) as Debian's 6.1 kernel does it (docs/DESIGN.md, "Observed on
    // Debian's 6.1 kernel"). add_aer: bdf has an AER capability, its aer_dev_* files counting
    // from 0. inject_aer, an error reported for bdf: a correctable one counts and raises no
    // uevent; a non-fatal one counts and runs the recovery; a fatal one runs it and counts
    // nothing of the endpoint. The recovery sends BEGIN_RECOVERY to every function below bdf's
    // upstream port (its siblings), then SUCCESSFUL_RECOVERY, or FAILED_RECOVERY to all when
    // `recovers` is false or one of them is on a driver that lacks_error_handlers().
    enum class AerKind { Correctable, NonFatal, Fatal };
    void add_aer(const std::string& bdf);
    void inject_aer(const std::string& bdf, AerKind kind, bool recovers = true);
    void lacks_error_handlers(const std::string& driver);
    // The function stops answering: its config space reads all ones, as a device that fell off
    // the bus does (the cached vendor file keeps its value).
    void lose_device(const std::string& bdf);

    struct Record {
        std::string path;
        std::string value;
        int result;  // 0 or errno
    };
    std::vector<Record> writes() const;
    unsigned blocked_now() const;
    unsigned reads_blocked() const;

    std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                    std::string* why = nullptr,
                                    const Dir* in = nullptr) const override;

    int write(std::string_view rel, std::string_view value) override;

private:
    // FakePciCore, for the SR-IOV model; with m_ held.
    void add_device(const FakeTree::Function& fn, const std::string& native_driver) override;
    void probe_new_device(const std::string& bdf) override;
    void remove_device(const std::string& bdf) override;
    void uevent(const std::string& action, const std::string& bdf) override;
    std::string native_driver(const std::string& bdf) const override;
    // FakeMdevCore; with m_ held.
    void raise(Uevent ev) override;
    // A PCI function's uevent; dir: its device dir when it is already gone from the tree.
    void pci_uevent(const std::string& action, const std::string& bdf, std::string dir = "");
    // The mdev model's store for rel, if rel is one of its attributes (see FakeMdev::store).
    std::optional<int> mdev_store(const std::string& rel, const std::string& value);

    // Binding and unbinding as the kernel's driver core does them, with their uevents.
    void attach(const std::string& bdf, const std::string& driver);
    void detach(const std::string& bdf);
    // Hands the queued uevents to the sink with the lock released.
    void deliver_uevents(std::unique_lock<std::mutex>& lock);

    int apply(const std::string& rel, const std::string& value);
    static std::string function_of_write(const std::string& rel, const std::string& value);
    int probe(const std::string& bdf);
    int bind_to(const std::string& bdf, const std::string& driver);
    int unbind_from(const std::string& bdf, const std::string& driver);
    std::string override_of(const std::string& bdf) const;
    std::string driver_of(const std::string& bdf) const;
    bool device_exists(const std::string& bdf) const;

    FakeTree& tree_;
    mutable std::mutex m_;
    mutable std::condition_variable cv_;
    std::map<std::string, std::string> native_;
    std::map<std::string, AerTotalsText> aer_;  // bdf -> its counts
    std::set<std::string> no_error_handlers_;
    std::set<std::string> literal_null_;  // functions whose override was written as "(null)"
    std::map<std::string, std::vector<std::string>> failing_probes_;
    std::map<std::string, std::map<unsigned, int>> path_faults_;  // rel -> nth -> errno
    std::map<std::string, unsigned> path_counts_;
    std::map<unsigned, int> step_faults_;
    std::vector<std::string> blocked_paths_;
    bool released_ = false;
    bool closing_ = false;  // the destructor runs: waiting mdev removes end
    unsigned steps_ = 0;
    mutable unsigned in_flight_ = 0;  // writes and blocked reads the destructor waits for
    unsigned blocked_ = 0;
    std::multiset<std::string> blocked_fns_;  // functions whose store is blocked now
    mutable unsigned reads_blocked_ = 0;
    std::function<void(unsigned, const std::string&)> hook_;
    std::vector<Record> records_;
    FakeSriov sriov_;
    FakeMdev mdev_;
    std::string mdev_waits_;  // an mdev whose remove, written now, waits for its device's close
    std::function<void(const std::string&, const std::string&)> uevent_sink_;
    std::function<void(const Uevent&)> device_sink_;
    std::vector<Uevent> uevents_;  // raised, not yet delivered
};

}  // namespace vfiod::test
