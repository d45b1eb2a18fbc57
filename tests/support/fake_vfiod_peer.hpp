// A stand-in for vfiod on a test's private bus, for what the real one cannot be made to do on
// cue: it owns org.vfiod1 and answers GetManagedObjects and the Manager's GetAll from an
// inventory the test sets, or holds every call unanswered (a frozen vfiod: the calls stay queued
// as they would in a SIGSTOPped process), or answers garbage; it emits PropertiesChanged (with
// or without the new value; a group's State or a function's Health) and InterfacesRemoved, gives
// up or takes its name on request, and
// stops the way vfiod does. Raw sd-bus: sdbus-c++ refuses to serve the standard ObjectManager
// and Properties interfaces by hand.
#pragma once

#include <poll.h>
#include <systemd/sd-bus.h>

#include <atomic>
#include <cctype>
#include <map>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vfiod::test {

class FakeVfiodPeer {
public:
    enum class Mode { Answer, Freeze, Garbage };
    struct Function {
        std::string address;  // "0000:01:00.0"
        unsigned group = 0;
        std::string resource;
        std::string state = "bound";
        // Health and HealthReason (DESIGN §13); "": not published, as by a vfiod without them.
        std::string health = "";
        std::string health_reason = "";
    };

    // A ready mediated device (DESIGN §12) with its own IOMMU group.
    struct Mdev {
        std::string uuid;  // canonical
        std::string parent;
        unsigned group = 0;
        std::string resource;
        std::string health = "";  // its parent's; "" not published
        std::string health_reason = "";
    };

    FakeVfiodPeer() = default;
    FakeVfiodPeer(const FakeVfiodPeer&) = delete;
    FakeVfiodPeer& operator=(const FakeVfiodPeer&) = delete;
    ~FakeVfiodPeer() { stop(); }

    // Connects to DBUS_SYSTEM_BUS_ADDRESS and owns org.vfiod1. False when it cannot.
    bool start() {
        if (sd_bus_open_system(&bus_) < 0)
            return false;
        if (sd_bus_add_object(bus_, nullptr, "/org/vfiod1", &FakeVfiodPeer::on_call, this) < 0 ||
            sd_bus_request_name(bus_, "org.vfiod1", 0) < 0)
            return false;
        thread_ = std::thread([this] { run(); });
        return true;
    }
    void stop() {
        if (thread_.joinable()) {
            quit_ = true;
            thread_.join();
        }
        std::lock_guard l(mu_);
        release_held_locked();
        bus_ = sd_bus_flush_close_unref(bus_);
    }

    void set_inventory(std::vector<Function> functions) {
        std::lock_guard l(mu_);
        functions_ = std::move(functions);
    }
    void set_mdevs(std::vector<Mdev> mdevs) {
        std::lock_guard l(mu_);
        mdevs_ = std::move(mdevs);
    }
    void set_mode(Mode m) {
        std::lock_guard l(mu_);
        mode_ = m;
    }
    // Answers every held call from the current inventory, as a SIGCONT would, and answers again.
    void thaw() {
        std::lock_guard l(mu_);
        mode_ = Mode::Answer;
        for (sd_bus_message* m : held_)
            answer_locked(m);
        release_held_locked();
    }
    // A change to the group whose value the signal does not carry (State invalidated): the
    // plugin can only read the whole inventory again.
    void emit_changed(unsigned group) {
        std::lock_guard l(mu_);
        std::string path = "/org/vfiod1/group/" + std::to_string(group);
        sd_bus_emit_signal(bus_, path.c_str(), "org.freedesktop.DBus.Properties",
                           "PropertiesChanged", "sa{sv}as", "org.vfiod1.Group", 0, 1, "State");
    }
    // What vfiod says when a group's State changes, value included (as the real one does): the
    // plugin applies it without reading anything. Later reads answer the new state too.
    void emit_state(unsigned group, const std::string& state) {
        std::lock_guard l(mu_);
        for (auto& f : functions_)
            if (f.group == group)
                f.state = state;
        std::string path = "/org/vfiod1/group/" + std::to_string(group);
        sd_bus_emit_signal(bus_, path.c_str(), "org.freedesktop.DBus.Properties",
                           "PropertiesChanged", "sa{sv}as", "org.vfiod1.Group", 1, "State", "s",
                           state.c_str(), 0);
    }
    // What vfiod says when the health of a group's functions changes: their Health and
    // HealthReason, then the group's Health (the worst of them), values included. Later reads
    // answer the new health too.
    void emit_health(unsigned group, const std::string& health, const std::string& reason) {
        std::lock_guard l(mu_);
        std::vector<const Function*> fns;
        for (auto& f : functions_)
            if (f.group == group) {
                f.health = health;
                f.health_reason = reason;
                fns.push_back(&f);
                emit_health_locked(device_path(f), "org.vfiod1.Device", health, reason);
            }
        if (fns.empty())
            return;
        std::string path = "/org/vfiod1/group/" + std::to_string(group);
        sd_bus_emit_signal(bus_, path.c_str(), "org.freedesktop.DBus.Properties",
                           "PropertiesChanged", "sa{sv}as", "org.vfiod1.Group", 1, "Health", "s",
                           worst_health(fns).c_str(), 0);
    }
    // The same for an mdev: its Health and HealthReason (its parent's), values included.
    void emit_mdev_health(const std::string& uuid, const std::string& health,
                          const std::string& reason) {
        std::lock_guard l(mu_);
        for (auto& m : mdevs_)
            if (m.uuid == uuid) {
                m.health = health;
                m.health_reason = reason;
                emit_health_locked(mdev_path(m), "org.vfiod1.MediatedDevice", health, reason);
            }
    }
    // What vfiod says when a Reload drops a group: InterfacesRemoved for its functions, then for
    // the group. Later reads answer without it.
    void emit_removed(unsigned group) {
        std::lock_guard l(mu_);
        emit_removed_locked(group);
    }
    // What a stopping vfiod does: its loop answers nothing more, every object is removed, then
    // it leaves the bus.
    void stop_as_vfiod_does() {
        {
            std::lock_guard l(mu_);
            quit_ = true;  // run() checks it under mu_: nothing is answered after this
            std::vector<unsigned> groups;
            for (const auto& f : functions_)
                groups.push_back(f.group);
            for (unsigned g : groups)
                emit_removed_locked(g);
            sd_bus_flush(bus_);
        }
        stop();
    }
    void own_name(bool own) {
        std::lock_guard l(mu_);
        if (own)
            sd_bus_request_name(bus_, "org.vfiod1", 0);
        else
            sd_bus_release_name(bus_, "org.vfiod1");
    }
    // GetManagedObjects calls received so far, answered or not.
    int reads() const { return reads_; }
    size_t held() const {
        std::lock_guard l(mu_);
        return held_.size();
    }

private:
    static int on_call(sd_bus_message* m, void* self, sd_bus_error*) {
        auto* peer = static_cast<FakeVfiodPeer*>(self);  // mu_ is held: run() processes under it
        if (!sd_bus_message_is_method_call(m, nullptr, nullptr))
            return 0;
        if (sd_bus_message_is_method_call(m, "org.freedesktop.DBus.ObjectManager",
                                          "GetManagedObjects"))
            ++peer->reads_;
        if (peer->mode_ == Mode::Freeze) {
            peer->held_.push_back(sd_bus_message_ref(m));
            return 1;
        }
        if (peer->mode_ == Mode::Garbage) {
            sd_bus_reply_method_return(m, "s", "this is no inventory");
            return 1;
        }
        peer->answer_locked(m);
        return 1;
    }

    void answer_locked(sd_bus_message* call) {
        sd_bus_message* r = nullptr;
        sd_bus_message_new_method_return(call, &r);
        if (sd_bus_message_is_method_call(call, "org.freedesktop.DBus.ObjectManager",
                                          "GetManagedObjects"))
            append_objects(r);
        else  // GetAll of org.vfiod1.Manager
            sd_bus_message_append(r, "a{sv}", 3, "Version", "s", "fake", "Mode", "s", "enforce",
                                  "IommuEnabled", "b", 1);
        sd_bus_send(bus_, r, nullptr);
        sd_bus_message_unref(r);
    }

    void append_objects(sd_bus_message* r) {
        std::map<unsigned, std::vector<const Function*>> groups;
        for (const auto& f : functions_)
            groups[f.group].push_back(&f);
        sd_bus_message_open_container(r, 'a', "{oa{sa{sv}}}");
        for (const auto& [g, fns] : groups) {
            append_group(r, g, fns);
            for (const Function* f : fns)
                append_device(r, *f);
        }
        for (const Mdev& m : mdevs_)
            append_mdev(r, m);
        sd_bus_message_close_container(r);
    }

    // {o a{s a{sv}}} of one function; Health and HealthReason only when it has them.
    static void append_device(sd_bus_message* r, const Function& f) {
        open_object(r, device_path(f), "org.vfiod1.Device");
        sd_bus_message_append(r, "{sv}{sv}{sv}{sv}", "Address", "s", f.address.c_str(),
                              "ResourceName", "s", f.resource.c_str(), "Role", "s", "allowlisted",
                              "NumaNode", "i", -1);
        append_health(r, f.health, f.health_reason);
        close_object(r);
    }

    // An object's {o a{s a{sv}}} up to its one interface's properties, and its end.
    static void open_object(sd_bus_message* r, const std::string& path, const char* iface) {
        sd_bus_message_open_container(r, 'e', "oa{sa{sv}}");
        sd_bus_message_append(r, "o", path.c_str());
        sd_bus_message_open_container(r, 'a', "{sa{sv}}");
        sd_bus_message_open_container(r, 'e', "sa{sv}");
        sd_bus_message_append(r, "s", iface);
        sd_bus_message_open_container(r, 'a', "{sv}");
    }
    static void close_object(sd_bus_message* r) {
        for (int i = 0; i < 4; ++i)  // a{sv}, e(sa{sv}), a{sa{sv}}, e(oa{sa{sv}})
            sd_bus_message_close_container(r);
    }
    // Health and HealthReason, unless not published ("").
    static void append_health(sd_bus_message* r, const std::string& health,
                              const std::string& reason) {
        if (!health.empty())
            sd_bus_message_append(r, "{sv}{sv}", "Health", "s", health.c_str(), "HealthReason",
                                  "s", reason.c_str());
    }

    // {o a{s a{sv}}} of one mdev, ready, with Health and HealthReason when it has them.
    static void append_mdev(sd_bus_message* r, const Mdev& m) {
        std::string vfio = "/dev/vfio/" + std::to_string(m.group);
        open_object(r, mdev_path(m), "org.vfiod1.MediatedDevice");
        sd_bus_message_append(r, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "Uuid", "s", m.uuid.c_str(),
                              "Parent", "s", m.parent.c_str(), "Type", "s", "nvidia-222",
                              "ResourceName", "s", m.resource.c_str(), "IommuGroup", "u", m.group,
                              "VfioPath", "s", vfio.c_str(), "State", "s", "ready");
        append_health(r, m.health, m.health_reason);
        close_object(r);
    }

    static std::string mdev_path(const Mdev& m) {
        std::string p = "/org/vfiod1/mdev/";
        for (char c : m.uuid)
            p += c == '-' ? '_' : c;
        return p;
    }

    // The worst of the functions' Health, vfiod's order: failed, degraded, unknown, ok; "" when
    // none publishes one.
    static std::string worst_health(const std::vector<const Function*>& fns) {
        static const char* const kOrder[] = {"failed", "degraded", "unknown", "ok"};
        for (const char* h : kOrder)
            for (const Function* f : fns)
                if (f->health == h)
                    return h;
        return "";
    }

    // {o a{s a{sv}}} of one group; its Devices (an array of paths) needs containers by hand.
    static void append_group(sd_bus_message* r, unsigned g, const std::vector<const Function*>& fns) {
        std::string path = "/org/vfiod1/group/" + std::to_string(g);
        std::string vfio = "/dev/vfio/" + std::to_string(g);
        sd_bus_message_open_container(r, 'e', "oa{sa{sv}}");
        sd_bus_message_append(r, "o", path.c_str());
        sd_bus_message_open_container(r, 'a', "{sa{sv}}");
        sd_bus_message_open_container(r, 'e', "sa{sv}");
        sd_bus_message_append(r, "s", "org.vfiod1.Group");
        sd_bus_message_open_container(r, 'a', "{sv}");
        sd_bus_message_append(r, "{sv}{sv}{sv}{sv}", "Id", "u", g, "State", "s",
                              fns.front()->state.c_str(), "VfioPath", "s", vfio.c_str(), "Reason",
                              "s", "none");
        if (std::string health = worst_health(fns); !health.empty())
            sd_bus_message_append(r, "{sv}", "Health", "s", health.c_str());
        sd_bus_message_open_container(r, 'e', "sv");
        sd_bus_message_append(r, "s", "Devices");
        sd_bus_message_open_container(r, 'v', "ao");
        sd_bus_message_open_container(r, 'a', "o");
        for (const Function* f : fns)
            sd_bus_message_append(r, "o", device_path(*f).c_str());
        for (int i = 0; i < 6; ++i)  // a, v, e(sv), a{sv}, e(sa{sv}), a{sa{sv}}
            sd_bus_message_close_container(r);
        sd_bus_message_close_container(r);  // e(oa{sa{sv}})
    }

    void emit_health_locked(const std::string& path, const char* iface, const std::string& health,
                            const std::string& reason) {
        sd_bus_emit_signal(bus_, path.c_str(), "org.freedesktop.DBus.Properties",
                           "PropertiesChanged", "sa{sv}as", iface, 2, "Health", "s",
                           health.c_str(), "HealthReason", "s", reason.c_str(), 0);
    }

    void emit_removed_locked(unsigned group) {
        std::vector<Function> kept;
        for (const auto& f : functions_) {
            if (f.group != group) {
                kept.push_back(f);
                continue;
            }
            sd_bus_emit_signal(bus_, "/org/vfiod1", "org.freedesktop.DBus.ObjectManager",
                               "InterfacesRemoved", "oas", device_path(f).c_str(), 1,
                               "org.vfiod1.Device");
        }
        if (kept.size() == functions_.size())
            return;
        functions_ = std::move(kept);
        std::string path = "/org/vfiod1/group/" + std::to_string(group);
        sd_bus_emit_signal(bus_, "/org/vfiod1", "org.freedesktop.DBus.ObjectManager",
                           "InterfacesRemoved", "oas", path.c_str(), 1, "org.vfiod1.Group");
    }

    static std::string device_path(const Function& f) {
        std::string p = "/org/vfiod1/device/d";
        for (char c : f.address)
            p += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
        return p;
    }

    void release_held_locked() {
        for (sd_bus_message* m : held_)
            sd_bus_message_unref(m);
        held_.clear();
    }

    void run() {
        while (!quit_) {
            pollfd p{};
            {
                std::lock_guard l(mu_);
                if (quit_)
                    break;
                while (sd_bus_process(bus_, nullptr) > 0) {
                }
                p.fd = sd_bus_get_fd(bus_);
                p.events = static_cast<short>(sd_bus_get_events(bus_));
            }
            poll(&p, 1, 20);
        }
    }

    mutable std::mutex mu_;
    sd_bus* bus_ = nullptr;
    std::thread thread_;
    std::atomic<bool> quit_{false};
    Mode mode_ = Mode::Answer;
    std::vector<Function> functions_;
    std::vector<Mdev> mdevs_;
    std::vector<sd_bus_message*> held_;
    std::atomic<int> reads_{0};
};

}  // namespace vfiod::test
