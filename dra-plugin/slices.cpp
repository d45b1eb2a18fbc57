#include "slices.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>

#include "api_objects.hpp"
#include "device_health.hpp"

namespace vfiod::dra {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view kSlicesPath = "/apis/resource.k8s.io/v1/resourceslices";
// Omission reports remembered (to log each once); past this many the memory is dropped and
// reports may repeat, rather than growing without bound under churn.
constexpr size_t kMaxRemembered = 65536;

}  // namespace

struct SlicePublisher::Impl {
    enum class Outcome { Ok, Retry, Refused };
    using Object = std::shared_ptr<const ServerSlice>;

    KubeApi& api;
    Options o;
    std::string list_path;

    mutable std::mutex mu;
    std::condition_variable cv;
    std::atomic<bool> stop_flag{false};
    std::thread reconciler, watcher;

    // Under mu.
    struct Shared {
        bool started = false, stopping = false;
        std::optional<std::vector<DraDevice>> desired;  // none until the first publish()
        std::map<std::string, Object> observed;          // our slices on the server, by name
        std::set<std::string> removing;  // deleted by remove(): their DELETED event is no news
        bool listed = false;
        bool dirty = false;
        struct {
            uint64_t tokens = 0;   // new tokens read (the API client's listener)
            uint64_t devices = 0;  // publish() calls that brought other devices
        } changes;
        uint64_t token_listener = 0;
        Stats stats;
    } shared;

    // The reconcile thread's own.
    struct Own {
        std::string node_uid;
        int64_t generation = 0;
        std::vector<DraDevice> generation_devices;
        bool have_generation = false;
        std::vector<SliceToWrite> wanted;  // pool_slices() for `generation`
        int64_t wanted_generation = -1;
        std::set<std::string> reported;  // omissions logged
        bool clearing_pool = false;       // the generation's way out, logged once
        // The server dropped the taints we sent (DESIGN §13): failed devices are withdrawn for
        // the rest of the process instead. `taints_just_dropped`: seen in this pass.
        bool taints_dropped = false, taints_just_dropped = false;
    } own;

    Impl(KubeApi& a, Options opts) : api(a), o(std::move(opts)) {
        list_path = std::string(kSlicesPath) + "?fieldSelector=" +
                    query_escape("spec.nodeName=" + o.node + ",spec.driver=" + o.driver);
    }

    std::string slice_path(const std::string& name) const {
        return std::string(kSlicesPath) + "/" + query_escape(name);
    }

    bool ours(const ServerSlice& obj) const {
        return obj.node_name == o.node && obj.driver == o.driver;
    }

    // What can cure a refusal (401, 403, 422) before its long wait is over: a new token (the
    // kubelet rotates them) and, for the writer, other devices to publish. Taken before the
    // request, so that nothing between the answer and the wait is missed.
    struct Cures {
        uint64_t tokens = 0;
        std::optional<uint64_t> devices;
    };
    Cures cures(bool devices) {
        std::lock_guard lk(mu);
        return {shared.changes.tokens,
                devices ? std::optional(shared.changes.devices) : std::nullopt};
    }

    // Sleeps for d unless stop() comes first; false when stopping. With `cured`, the wait also
    // ends at once when the token changed since, and when the devices did, a second after it
    // began at the earliest (an inventory that keeps changing does not hammer the server).
    bool sleep_for(milliseconds d, std::optional<Cures> cured = std::nullopt) {
        auto start = Clock::now();
        std::unique_lock lk(mu);
        auto token = [&] {
            return shared.stopping || (cured && shared.changes.tokens != cured->tokens);
        };
        if (cv.wait_until(lk, start + std::min<milliseconds>(d, std::chrono::seconds(1)), token))
            return !shared.stopping;
        cv.wait_until(lk, start + d, [&] {
            return token() ||
                   (cured && cured->devices && shared.changes.devices != *cured->devices);
        });
        return !shared.stopping;
    }
    milliseconds next(milliseconds* backoff) const {
        milliseconds now = *backoff;
        *backoff = std::min(o.backoff_max, *backoff * 2);
        return now;
    }

    // The object the server has under `name`, unless a newer copy is known (force: in any case,
    // after a conflict told us ours is stale). Under mu.
    void store(const std::string& name, ServerSlice obj, bool force) {
        auto it = shared.observed.find(name);
        if (it != shared.observed.end() && !force &&
            older(obj.resource_version, it->second->resource_version))
            return;
        shared.observed[name] = std::make_shared<const ServerSlice>(std::move(obj));
    }
    void store_locked(const std::string& name, ServerSlice obj, bool force) {
        std::lock_guard lk(mu);
        store(name, std::move(obj), force);
    }
    void forget(const std::string& name) {
        std::lock_guard lk(mu);
        shared.observed.erase(name);
    }

    void failed() {
        std::lock_guard lk(mu);
        ++shared.stats.failures;
    }
    Outcome classify(const ApiResponse& r, const std::string& what) {
        failed();
        if (r.retryable() || r.status == 409 || r.status == 404) {
            spdlog::warn("{}: {}; retrying", what, r.describe());
            return Outcome::Retry;
        }
        // 401 after a token re-read, 403 (RBAC), 422 (a slice the API refuses): retrying soon
        // cures nothing; retried at the slow end in case the cluster is fixed meanwhile.
        spdlog::error("{}: {}; retrying in {} s", what, r.describe(), o.backoff_max.count() / 1000);
        return Outcome::Refused;
    }

    // ---- the Node ----

    void read_node_uid() {
        milliseconds backoff = o.backoff_min;
        const std::string path = "/api/v1/nodes/" + query_escape(o.node);
        while (!stop_flag) {
            Cures cure = cures(false);
            ApiResponse r = api.request("GET", path, "", o.request_timeout);
            std::string why;
            if (r.ok()) {
                std::string uid = parse_node_uid(r.body);
                if (!uid.empty()) {
                    own.node_uid = uid;
                    std::lock_guard lk(mu);
                    shared.stats.node_uid = uid;
                    spdlog::info("Node {} has UID {}: it owns the ResourceSlices", o.node, uid);
                    return;
                }
                why = "the answer is no Node with a metadata.uid";
            } else {
                why = r.describe();
            }
            failed();
            // A Node not (yet) registered is worth waiting for at the normal pace.
            bool slow = r.status != 0 && !r.retryable() && r.status != 404 && r.status != 200;
            milliseconds wait = slow ? o.backoff_max : next(&backoff);
            spdlog::warn("cannot read Node {} (GET {}): {}; no slices are written before its UID "
                         "is known; retrying in {} ms",
                         o.node, path, why, wait.count());
            if (!sleep_for(wait, cure))
                return;
        }
    }

    // ---- reconcile ----

    // An API server whose DRADeviceTaints gate is off takes the slice and drops the taints:
    // rewriting would never make it hold them. Taints are not sent again in this process (a
    // restart of the plugin tries them again); a failed device is withdrawn instead, as a
    // released one is. Said once.
    void check_taints(const ServerSlice& got, const SliceToWrite& sent) {
        if (own.taints_dropped || !taints_dropped(got, sent))
            return;
        own.taints_dropped = own.taints_just_dropped = true;
        {
            std::lock_guard lk(mu);
            shared.stats.taints_dropped = true;
        }
        spdlog::warn("the API server dropped the device taints of ResourceSlice {} (its "
                     "DRADeviceTaints feature gate is off): failed devices are withdrawn from the "
                     "slices instead, while they are failed; restart the plugin to try taints "
                     "again",
                     sent.name);
    }

    Outcome create(const SliceToWrite& want) {
        const std::string& name = want.name;
        ApiResponse r = api.request("POST", std::string(kSlicesPath), create_body(want),
                                    o.request_timeout);
        if (r.ok()) {
            std::optional<ServerSlice> got = parse_server_slice(r.body);
            if (got)
                check_taints(*got, want);
            {
                std::lock_guard lk(mu);
                ++shared.stats.creates;
                if (got)
                    store(name, std::move(*got), false);
            }
            spdlog::debug("ResourceSlice {} created", name);
            return Outcome::Ok;
        }
        if (r.status == 409) {
            // AlreadyExists: a slice of that name that the watch has not shown us yet (or one of
            // an earlier run). Take it and make it ours.
            ApiResponse g = api.request("GET", slice_path(name), "", o.request_timeout);
            std::optional<ServerSlice> got = g.ok() ? parse_server_slice(g.body) : std::nullopt;
            if (!g.ok() || !got)
                return classify(g.ok() ? ApiResponse{0, "", "garbage in answer"} : g,
                                "ResourceSlice " + name + ": GET after 409 on create");
            store_locked(name, *got, true);
            return update(want, *got);
        }
        return classify(r, "ResourceSlice " + name + ": create");
    }

    Outcome update(const SliceToWrite& want, const ServerSlice& have) {
        const std::string& name = want.name;
        ApiResponse r = api.request("PUT", slice_path(name),
                                    update_body(want, have.resource_version), o.request_timeout);
        if (r.ok()) {
            std::optional<ServerSlice> got = parse_server_slice(r.body);
            if (got)
                check_taints(*got, want);
            std::lock_guard lk(mu);
            ++shared.stats.updates;
            if (got)
                store(name, std::move(*got), false);
            return Outcome::Ok;
        }
        if (r.status == 409) {
            // Stale resourceVersion: read it again; the next pass (after the short backoff)
            // writes on top of the current one.
            ApiResponse g = api.request("GET", slice_path(name), "", o.request_timeout);
            std::optional<ServerSlice> got = g.ok() ? parse_server_slice(g.body) : std::nullopt;
            if (got)
                store_locked(name, std::move(*got), true);
            else if (g.status == 404)
                forget(name);
        } else if (r.status == 404) {
            forget(name);  // deleted meanwhile: created again by the next pass
        }
        return classify(r, "ResourceSlice " + name + ": update");
    }

    Outcome remove(const std::string& name, const ServerSlice& have) {
        {
            std::lock_guard lk(mu);
            shared.removing.insert(name);
        }
        ApiResponse r = api.request("DELETE", slice_path(name), "", o.request_timeout);
        if (!r.ok()) {
            std::lock_guard lk(mu);
            shared.removing.erase(name);  // no DELETED event of ours will come
        }
        if (r.ok() || r.status == 404) {
            std::lock_guard lk(mu);
            if (r.ok())
                ++shared.stats.deletes;
            auto it = shared.observed.find(name);
            // Only the copy we meant to delete: one created meanwhile (by a later pass) stays.
            if (it != shared.observed.end() &&
                it->second->resource_version == have.resource_version)
                shared.observed.erase(it);
            spdlog::info("stale ResourceSlice {} deleted", name);
            return Outcome::Ok;
        }
        return classify(r, "ResourceSlice " + name + ": delete");
    }

    // The pool's generation cannot go above the int64 top (2^63-1, which anyone may have
    // written): the way out is to delete all of the pool's slices, after which any generation
    // is above all the others, and count again from 1. Ok when they are all gone.
    Outcome clear_pool(const std::map<std::string, Object>& have) {
        if (!std::exchange(own.clearing_pool, true))
            spdlog::warn("ResourceSlices of {}: the pool's generation is at its top ({}); "
                         "deleting the pool's {} slice(s) to start again at generation 1",
                         o.node, std::numeric_limits<int64_t>::max(), have.size());
        Outcome worst = Outcome::Ok;
        for (const auto& [name, obj] : have) {
            if (stop_flag)
                return Outcome::Retry;
            worst = std::max(worst, remove(name, *obj));
        }
        own.clearing_pool = worst != Outcome::Ok;
        return worst;
    }

    // A generation of its own for other devices: consumers take the pool's slices of the
    // highest generation, so a change must carry one above any an earlier run (or anyone)
    // wrote. Not Ok when the pool had to be cleared first and could not be.
    Outcome advance_generation(std::vector<DraDevice> devices,
                               std::map<std::string, Object>* have) {
        if (own.have_generation && devices == own.generation_devices)
            return Outcome::Ok;
        int64_t top = own.generation;
        for (const auto& [name, obj] : *have)
            top = std::max(top, obj->generation.value_or(0));
        if (top == std::numeric_limits<int64_t>::max()) {
            if (Outcome out = clear_pool(*have); out != Outcome::Ok)
                return out;
            have->clear();
            top = 0;
            own.wanted_generation = -1;  // generation 1 may have been made for other devices
        }
        own.generation = top + 1;
        own.generation_devices = std::move(devices);
        own.have_generation = true;
        return Outcome::Ok;
    }

    // `wanted`: the slices of the generation, made once for it; what they leave out is logged
    // once.
    void make_wanted() {
        if (own.wanted_generation == own.generation)
            return;
        std::vector<std::string> omitted;
        own.wanted.clear();
        for (const ResourceSlice& slice :
             pool_slices(own.generation_devices,
                         Pool{o.driver, o.node, own.node_uid, own.generation}, &omitted))
            own.wanted.push_back(to_write(slice));
        own.wanted_generation = own.generation;
        if (own.reported.size() > kMaxRemembered)
            own.reported.clear();
        for (const auto& what : omitted)
            if (own.reported.insert(what).second)
                spdlog::warn("ResourceSlice attribute left out: {} (a string attribute "
                             "value is at most {} characters in the API)",
                             what, kMaxStringAttribute);
    }

    // Creates, updates and deletes until the server holds `wanted`: the worst outcome, or
    // nullopt when the publisher stopped in the middle.
    std::optional<Outcome> write_wanted(const std::map<std::string, Object>& have) {
        Outcome worst = Outcome::Ok;
        auto note = [&](Outcome x) { worst = std::max(worst, x); };
        std::set<std::string> names;
        for (const auto& want : own.wanted) {
            if (stop_flag)
                return std::nullopt;
            names.insert(want.name);
            auto it = have.find(want.name);
            if (it == have.end())
                note(create(want));
            else if (!holds(*it->second, want))
                note(update(want, *it->second));
            if (own.taints_just_dropped)
                return worst;  // the wanted slices change: the next pass writes those
        }
        for (const auto& [name, obj] : have) {
            if (stop_flag)
                return std::nullopt;
            if (!names.count(name)) {
                note(remove(name, *obj));
            }
        }
        return worst;
    }

    Outcome pass() {
        std::vector<DraDevice> devices;
        std::map<std::string, Object> have;
        {
            std::lock_guard lk(mu);
            devices = *shared.desired;
            have = shared.observed;
        }
        if (own.taints_dropped)
            std::erase_if(devices,
                          [](const DraDevice& d) { return !taint_value(d.health).empty(); });
        if (Outcome out = advance_generation(std::move(devices), &have); out != Outcome::Ok)
            return out;
        make_wanted();
        std::optional<Outcome> written = write_wanted(have);
        if (!written)
            return Outcome::Retry;
        Outcome worst = *written;
        std::lock_guard lk(mu);
        if (std::exchange(own.taints_just_dropped, false)) {
            shared.dirty = true;  // at once: the pool without the failed devices
            shared.stats.in_sync = false;
            return worst;
        }
        if (worst == Outcome::Ok)
            // Written now, or what the server has already.
            shared.stats.generation = own.generation;
        shared.stats.in_sync = worst == Outcome::Ok && !shared.dirty;
        return worst;
    }

    void reconcile_main() {
        read_node_uid();
        milliseconds backoff = o.backoff_min;
        while (true) {
            {
                std::unique_lock lk(mu);
                cv.wait(lk, [&] {
                    return shared.stopping || (shared.dirty && shared.listed && shared.desired);
                });
                if (shared.stopping)
                    return;
                shared.dirty = false;
            }
            Cures cure = cures(true);
            Outcome out = Outcome::Retry;
            try {
                out = pass();
            } catch (const std::exception& e) {
                spdlog::error("ResourceSlices of {}: {}; retrying", o.node, e.what());
            }
            if (out == Outcome::Ok) {
                backoff = o.backoff_min;
                continue;
            }
            milliseconds wait = out == Outcome::Refused ? o.backoff_max : next(&backoff);
            {
                std::lock_guard lk(mu);
                shared.dirty = true;
                shared.stats.in_sync = false;
            }
            // The whole wait, whatever arrives meanwhile: a failing server is not hammered
            // because events or publish() calls keep coming. A refusal's may be cured sooner.
            if (!sleep_for(wait, out == Outcome::Refused ? std::optional(cure) : std::nullopt))
                return;
        }
    }

    // ---- list and watch ----

    // False: garbage or not a list. Replaces what is observed.
    bool take_list(const std::string& body, std::string* rv) {
        SliceList list;
        if (!parse_slice_list(body, &list))
            return false;
        std::map<std::string, Object> mine;
        for (auto& item : list.items) {
            if (!ours(item))
                continue;  // the field selector should have left it out; ignored if not
            if (item.name.empty())
                continue;
            std::string name = item.name;
            mine[name] = std::make_shared<const ServerSlice>(std::move(item));
        }
        *rv = list.resource_version;
        std::lock_guard lk(mu);
        shared.observed = std::move(mine);
        shared.removing.clear();  // a relist: events of earlier deletes may never come
        shared.listed = true;
        shared.dirty = true;
        ++shared.stats.lists;
        cv.notify_all();
        return true;
    }

    enum class LineResult { Ok, Gone, Error, Garbage };

    LineResult take_event(const std::string& line, std::string* rv) {
        std::optional<WatchEvent> ev = parse_watch_event(line);
        if (!ev)
            return LineResult::Garbage;
        using Type = WatchEvent::Type;
        if (ev->type == Type::Bookmark) {
            if (!ev->object.resource_version.empty())
                *rv = ev->object.resource_version;
            return LineResult::Ok;
        }
        if (ev->type == Type::Error) {
            if (ev->code == 410)
                return LineResult::Gone;
            spdlog::warn("watch of ResourceSlices for {}: ERROR event: {}", o.node, ev->message);
            return LineResult::Error;
        }
        const std::string name = ev->object.name;
        const std::string v = ev->object.resource_version;
        const bool deleted = ev->type == Type::Deleted;
        {
            std::lock_guard lk(mu);
            ++shared.stats.watch_events;
            if (deleted || !ours(ev->object)) {
                auto it = shared.observed.find(name);
                if (it != shared.observed.end() && !older(v, it->second->resource_version))
                    shared.observed.erase(it);
            } else {
                store(name, std::move(ev->object), false);
            }
            shared.dirty = true;
            cv.notify_all();
        }
        bool news = false;
        if (deleted) {
            std::lock_guard lk(mu);
            news = shared.removing.erase(name) == 0;
        }
        if (news)
            spdlog::info("ResourceSlice {} was deleted; writing it again if it is wanted", name);
        if (!v.empty())
            *rv = v;
        return LineResult::Ok;
    }

    // Lists our slices into `observed`, *rv the list's resourceVersion: Next. Otherwise it
    // waits its backoff (Again) or was stopped in it (Stop).
    enum class Step { Next, Again, Stop };
    Step list(std::string* rv, milliseconds* backoff) {
        ApiResponse r;
        Cures cure = cures(false);
        try {
            r = api.request("GET", list_path, "", o.request_timeout);
            if (r.ok() && !take_list(r.body, rv)) {
                r.status = 0;
                r.error = "the answer is not a ResourceSliceList (garbage JSON)";
            }
        } catch (const std::exception& e) {
            r.status = 0;
            r.error = e.what();
        }
        if (r.ok())
            return Step::Next;
        failed();
        bool slow = r.status != 0 && !r.retryable();
        milliseconds wait = slow ? o.backoff_max : next(backoff);
        spdlog::warn("cannot list ResourceSlices (GET {}): {}; retrying in {} ms", list_path,
                     r.describe(), wait.count());
        return sleep_for(wait, cure) ? Step::Again : Step::Stop;
    }

    // One watch from *rv, which follows the events; how it ended.
    struct WatchRun {
        ApiResponse answer;
        LineResult end = LineResult::Ok;
        size_t delivered = 0;  // ADDED, MODIFIED, DELETED and BOOKMARK events
    };
    WatchRun watch_once(std::string* rv) {
        std::string path = list_path + "&watch=true&allowWatchBookmarks=true" +
                           "&timeoutSeconds=" + std::to_string(o.watch_timeout_seconds);
        if (!rv->empty())
            path += "&resourceVersion=" + query_escape(*rv);
        WatchRun run;
        auto on_line = [&](const std::string& line) {
            if (line.find_first_not_of(" \t\r\n") == std::string::npos)
                return true;
            try {
                run.end = take_event(line, rv);
            } catch (const std::exception&) {
                run.end = LineResult::Garbage;
            }
            run.delivered += run.end == LineResult::Ok;
            return run.end == LineResult::Ok;
        };
        try {
            run.answer = api.watch(path, on_line, stop_flag, o.watch_idle);
        } catch (const std::exception& e) {
            run.answer.status = 0;
            run.answer.error = e.what();
        }
        return run;
    }

    // Watches from the list's resourceVersion until a relist is needed (true) or the
    // publisher stops (false).
    bool watch_from(std::string rv, milliseconds* backoff, bool* relist_now) {
        while (!stop_flag) {
            WatchRun run = watch_once(&rv);
            const ApiResponse& w = run.answer;
            if (stop_flag)
                return false;
            if (run.end == LineResult::Gone || w.status == 410) {
                // Compacted history (an ERROR event after a 200, or an HTTP 410): list again.
                spdlog::debug("watch of ResourceSlices: resourceVersion {} expired", rv);
                return std::exchange(*relist_now, false) || sleep_for(next(backoff));
            }
            if (run.end == LineResult::Ok && w.ok()) {
                // The server ended the watch without an ERROR (timeoutSeconds): go on from rv.
                // Healthy if it delivered an event; a bare 200 keeps the backoff, so it cannot
                // make us spin.
                if (run.delivered > 0) {
                    *backoff = o.backoff_min;
                    *relist_now = true;
                } else if (!sleep_for(next(backoff))) {
                    return false;
                }
                continue;
            }
            failed();
            milliseconds wait = next(backoff);
            if (run.end == LineResult::Garbage)
                spdlog::warn("watch of ResourceSlices sent garbage; listing again in {} ms",
                             wait.count());
            else
                spdlog::warn("watch of ResourceSlices ended: {}; listing again in {} ms",
                             w.ok() ? std::string("ERROR event") : w.describe(), wait.count());
            return sleep_for(wait);
        }
        return true;
    }

    void watch_main() {
        milliseconds backoff = o.backoff_min;
        // A 410 lists again at once only the first time after a healthy watch: an API server
        // that answers every watch with one is not listed and watched at full speed.
        bool relist_now = true;
        while (!stop_flag) {
            std::string rv;
            Step step = list(&rv, &backoff);
            if (step == Step::Stop)
                return;
            if (step == Step::Next && !watch_from(rv, &backoff, &relist_now))
                return;
        }
    }
};

SlicePublisher::SlicePublisher(KubeApi& api, Options o)
    : impl_(std::make_unique<Impl>(api, std::move(o))) {}

SlicePublisher::~SlicePublisher() { stop(); }

void SlicePublisher::start() {
    Impl* i = impl_.get();
    // Before taking mu, which the listener takes.
    uint64_t listener = i->api.add_token_listener([i] {
        std::lock_guard lk(i->mu);
        ++i->shared.changes.tokens;
        i->cv.notify_all();
    });
    std::unique_lock lk(i->mu);
    if (i->shared.started || i->shared.stopping) {
        lk.unlock();
        i->api.remove_token_listener(listener);
        return;
    }
    i->shared.started = true;
    i->shared.token_listener = listener;
    i->watcher = std::thread([i] {
        try {
            i->watch_main();
        } catch (const std::exception& e) {
            spdlog::critical("ResourceSlice watch stopped: {}", e.what());
        }
    });
    i->reconciler = std::thread([i] {
        try {
            i->reconcile_main();
        } catch (const std::exception& e) {
            spdlog::critical("ResourceSlice writer stopped: {}", e.what());
        }
    });
}

void SlicePublisher::publish(std::vector<DraDevice> devices) {
    std::sort(devices.begin(), devices.end(),
              [](const DraDevice& a, const DraDevice& b) { return a.name < b.name; });
    // Of a device's health, the slices say only its taint (DESIGN §13): a count moving in a
    // failed device's reason, or degraded for ok, is no change to write.
    for (DraDevice& d : devices) {
        std::string taint = taint_value(d.health);
        d.health = taint.empty() ? client::Health{} : client::Health{"failed", std::move(taint)};
    }
    std::lock_guard lk(impl_->mu);
    if (impl_->shared.desired && *impl_->shared.desired == devices)
        return;
    impl_->shared.desired = std::move(devices);
    ++impl_->shared.changes.devices;
    impl_->shared.dirty = true;
    impl_->shared.stats.in_sync = false;
    impl_->cv.notify_all();
}

void SlicePublisher::stop() {
    uint64_t listener = 0;
    {
        std::lock_guard lk(impl_->mu);
        impl_->shared.stopping = true;
        listener = std::exchange(impl_->shared.token_listener, 0);
    }
    if (listener)
        impl_->api.remove_token_listener(listener);
    impl_->stop_flag = true;
    impl_->api.wake_watches();
    impl_->cv.notify_all();
    if (impl_->watcher.joinable())
        impl_->watcher.join();
    if (impl_->reconciler.joinable())
        impl_->reconciler.join();
}

SlicePublisher::Stats SlicePublisher::stats() const {
    std::lock_guard lk(impl_->mu);
    return impl_->shared.stats;
}

}  // namespace vfiod::dra
