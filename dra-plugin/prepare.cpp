#include "prepare.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "api_objects.hpp"
#include "cdi.hpp"
#include "checkpoints.hpp"
#include "core/strings.hpp"
#include "group_reservations.hpp"
#include "metadata.hpp"
#include "model.hpp"
#include "state_files.hpp"

namespace vfiod::dra {

struct Preparer::Impl {
    Options o;
    KubeApi& api;
    InventoryFn inventory;
    StateFiles files;
    CheckpointStore store;

    mutable std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, Checkpoint> claims;  // by UID: prepared, or intent left by a crash
    std::set<std::string> busy;                // UIDs a call is working on
    GroupReservations groups;

    Impl(Options opts, KubeApi& a, InventoryFn inv, const HostFs& host)
        : o(std::move(opts)),
          api(a),
          inventory(std::move(inv)),
          files(host),
          store({o.driver, o.cdi_dir, o.state_dir}, files) {}

    // Takes the claim for this call: a second call for the same claim waits for the first,
    // so two never write the same files. Bounded, and by the call's deadline: a call stuck on a
    // hung disk does not hold the kubelet's next call for ever.
    bool take(const std::string& uid, const CallLimit& call, std::string* err) {
        std::unique_lock<std::mutex> l(mu);
        auto wait = call.left(o.request_timeout * 3 + std::chrono::seconds(30));
        if (!cv.wait_for(l, wait, [&] { return !busy.count(uid); })) {
            *err = "another Prepare or Unprepare of this claim is still running";
            return false;
        }
        busy.insert(uid);
        return true;
    }
    void give_back(const std::string& uid) {
        {
            std::lock_guard<std::mutex> l(mu);
            busy.erase(uid);
        }
        cv.notify_all();
    }


    PrepareResult prepare(const ClaimRef& ref, const CallLimit& call);
    std::string unprepare(const ClaimRef& ref, const CallLimit& call);
    bool load(std::string* err);
};

namespace {

// What one Prepare will write: the checkpoint's devices and files, and each file's content.
struct Plan {
    Checkpoint cp;
    std::vector<std::pair<std::string, std::string>> files;  // host path, content
};

}  // namespace

PrepareResult Preparer::Impl::prepare(const ClaimRef& ref, const CallLimit& call) {
    const std::string who = "claim " + ref.str();
    if (!safe_uid(ref.uid) || !safe_name(ref.namespace_) || !safe_name(ref.name))
        return {who + ": the UID, namespace or name cannot be a Kubernetes one", {}};
    std::string err;
    if (!take(ref.uid, call, &err))
        return {who + ": " + err, {}};
    struct Give {
        Impl& i;
        const std::string& uid;
        ~Give() { i.give_back(uid); }
    } give{*this, ref.uid};

    std::optional<Checkpoint> old;  // the intent a crash left, if any
    {
        std::lock_guard<std::mutex> l(mu);
        if (auto it = claims.find(ref.uid); it != claims.end()) {
            // Answered from the checkpoint, without asking the inventory again: the kubelet
            // retries Prepare for pods that already run (after its own restart, say), and
            // refusing them because vfiod is restarting would not undo what they hold.
            if (it->second.prepared)
                return {"", it->second.answer()};
            old = it->second;
        }
    }

    // The API's answer, with no lock held: a thousand claims wait for it side by side.
    const std::string url = "/apis/resource.k8s.io/v1/namespaces/" + ref.namespace_ +
                            "/resourceclaims/" + ref.name;
    const auto timeout = call.left(o.request_timeout);
    if (std::string why = call.over(); !why.empty() || timeout.count() == 0)
        return {who + ": not read from the API server: " +
                    (why.empty() ? "the kubelet's call has no time left" : why), {}};
    // Cut off at kMaxClaimBytes as it streams in, not after it was read whole.
    ApiResponse resp = api.request("GET", url, "", timeout, kMaxClaimBytes);
    if (!resp.ok())
        return {who + ": GET " + url + ": " + resp.describe(), {}};
    ResourceClaim claim;
    if (!parse_claim(resp.body, &claim, &err))
        return {who + ": the API server's answer to GET " + url + ": " + err, {}};
    if (claim.uid != ref.uid)
        return {who + ": the API server has UID " + printable(claim.uid) +
                    " for it, not the kubelet's (deleted and made again?)", {}};
    // Its name becomes the container path of the metadata file: the one the kubelet named.
    if (claim.namespace_ != ref.namespace_ || claim.name != ref.name)
        return {who + ": the API server answered for " + printable(claim.namespace_) + "/" +
                    printable(claim.name), {}};
    if (!claim.allocated)
        return {who + ": not allocated (status.allocation is missing)", {}};

    std::shared_ptr<const DraInventory> inv = inventory();
    if (!inv)
        return {who + ": vfiod's inventory is not known yet (is vfiod running?)", {}};

    // Our results, by device (a device may serve several requests).
    std::map<std::string, std::vector<std::string>> requests_of;
    std::map<std::string, const DraDevice*> dev_of;
    for (const auto& r : claim.results) {
        if (r.driver != o.driver)
            continue;
        const std::string dev = printable(r.device);
        if (r.pool != o.node)
            return {who + ": device " + dev + " is allocated to node " + printable(r.pool) +
                        "'s pool, not to this node's (" + o.node + ")", {}};
        if (!safe_request(r.request))
            return {who + ": request name '" + printable(r.request) + "' is not a request name", {}};
        const DraDevice* d = inv->find(r.device);
        if (!d) {
            auto a = parse_device_name(r.device);
            return {who + ": device " + dev + (a ? " (" + a->str() + ")" : std::string()) +
                        " was released between scheduling and Prepare: vfiod no longer "
                        "publishes it as bound", {}};
        }
        auto& rq = requests_of[r.device];
        if (std::find(rq.begin(), rq.end(), r.request) == rq.end())
            rq.push_back(r.request);
        dev_of[r.device] = d;
    }
    if (dev_of.empty())
        return {who + ": no device of it is allocated by driver " + o.driver, {}};

    // The plan: the checkpoint's devices, the metadata files (one per request), the CDI spec.
    Plan plan;
    plan.cp.claim = ref;
    std::map<std::string, std::vector<const DraDevice*>> by_request;  // parent request -> devices
    for (const auto& [name, d] : dev_of) {
        Checkpoint::Device cd;
        cd.answer = {requests_of[name], o.node, name, {cdi_device_id(ref.uid, name)}};
        cd.group = d->group;
        cd.address = d->address.str();
        plan.cp.devices.push_back(cd);
        std::set<std::string> parents;
        for (const auto& r : requests_of[name])
            parents.insert(parent_request(r));
        for (const auto& p : parents)
            by_request[p].push_back(d);
    }
    std::map<std::string, std::string> meta_host;  // parent request -> host path
    for (const auto& [request, devices] : by_request) {
        std::string host_path = metadata_host_path(o.state_dir, ref.uid, request, o.driver);
        meta_host[request] = host_path;
        plan.files.emplace_back(host_path,
                                metadata_file(claim, request, o.driver, o.node, devices));
    }
    std::vector<CdiDevice> cdi_devices;
    for (const auto& cd : plan.cp.devices) {
        CdiDevice d{ref.uid, cd.answer.device,
                    plugin::group_device_nodes(inv->snapshot, {cd.group}, files.host()), {}};
        std::set<std::string> parents;
        for (const auto& r : cd.answer.requests)
            parents.insert(parent_request(r));
        for (const auto& p : parents)
            d.mounts.push_back({meta_host[p], metadata_container_path(claim, p, o.driver)});
        cdi_devices.push_back(std::move(d));
    }
    plan.files.emplace_back(cdi_spec_path(o.cdi_dir, ref.uid), cdi_spec(cdi_devices));
    for (const auto& f : plan.files)
        plan.cp.files.push_back(f.first);

    // The group rule, checked and the groups taken in one step, so that of two claims racing
    // for one group exactly one gets it.
    std::vector<GroupReservations::Want> wants;
    for (const auto& cd : plan.cp.devices)
        wants.push_back({cd.group, cd.answer.device, cd.address});
    if (std::string e = groups.reserve(ref, wants); !e.empty())
        return {who + ": " + e, {}};

    // Intent first (every file this call or a crashed one may have written), then the files,
    // then the checkpoint final: a SIGKILL anywhere leaves what a retry or Unprepare finishes.
    Checkpoint intent = plan.cp;
    if (old)
        for (const auto& f : old->files)
            if (std::find(intent.files.begin(), intent.files.end(), f) == intent.files.end())
                intent.files.push_back(f);
    auto undo = [&](const std::string& why) -> PrepareResult {
        std::string left = store.remove(intent);
        std::lock_guard<std::mutex> l(mu);
        if (left.empty()) {
            claims.erase(ref.uid);
            groups.release(ref.uid);
            return {who + ": " + why, {}};
        }
        // Something could not be removed: keep the intent, so Unprepare can try again.
        claims[ref.uid] = intent;
        return {who + ": " + why + "; and cleaning up: " + left, {}};
    };
    if (std::string e = store.write(intent); !e.empty())
        return undo(e);
    for (const auto& [host_path, content] : plan.files)
        if (std::string e = files.write(host_path, content, 0644); !e.empty())
            return undo(e);
    if (old)  // a crashed attempt's files that this one does not write
        for (const auto& f : old->files)
            if (std::find(plan.cp.files.begin(), plan.cp.files.end(), f) == plan.cp.files.end())
                if (std::string e = files.remove(f); !e.empty())
                    return undo(e);
    plan.cp.prepared = true;
    if (std::string e = store.write(plan.cp); !e.empty())
        return undo(e);
    std::lock_guard<std::mutex> l(mu);
    claims[ref.uid] = plan.cp;
    return {"", plan.cp.answer()};
}

std::string Preparer::Impl::unprepare(const ClaimRef& ref, const CallLimit& call) {
    const std::string who = "claim " + ref.str();
    if (!safe_uid(ref.uid))
        return who + ": the UID cannot be a Kubernetes one";
    std::string err;
    if (!take(ref.uid, call, &err))
        return who + ": " + err;
    struct Give {
        Impl& i;
        const std::string& uid;
        ~Give() { i.give_back(uid); }
    } give{*this, ref.uid};
    Checkpoint cp;
    {
        std::lock_guard<std::mutex> l(mu);
        auto it = claims.find(ref.uid);
        if (it == claims.end())
            return "";  // never prepared, or already unprepared
        cp = it->second;
    }
    if (std::string e = store.remove(cp); !e.empty())
        return who + ": " + e;
    std::lock_guard<std::mutex> l(mu);
    claims.erase(ref.uid);
    groups.release(ref.uid);  // the groups stay bound: that is vfiod's business
    return "";
}

bool Preparer::Impl::load(std::string* err) {
    std::map<std::string, Checkpoint> loaded;
    GroupReservations::Holders held;
    auto take_one = [&](Checkpoint&& cp) {
        const std::string uid = cp.claim.uid;
        for (const auto& d : cp.devices)
            GroupReservations::add(&held, cp.claim, d.group, d.address);
        if (!cp.prepared)
            spdlog::info("claim {} was being prepared when the plugin stopped: a retried Prepare "
                         "finishes it, Unprepare removes it", cp.claim.str());
        loaded.emplace(uid, std::move(cp));
    };
    if (!store.load(take_one, err))
        return false;
    std::lock_guard<std::mutex> l(mu);
    claims = std::move(loaded);
    groups.restore(std::move(held));
    spdlog::info("{} claim checkpoint(s) read from {}", claims.size(), store.dir());
    return true;
}

Preparer::Preparer(Options o, KubeApi& api, InventoryFn inventory, const HostFs& host)
    : impl_(std::make_shared<Impl>(std::move(o), api, std::move(inventory), host)) {}

bool Preparer::load(std::string* err) {
    try {
        return impl_->load(err);
    } catch (const std::exception& e) {
        *err = std::string("reading the checkpoints: ") + e.what();
        return false;
    }
}

PrepareResult Preparer::prepare(const ClaimRef& claim, const CallLimit& limit) {
    try {
        return impl_->prepare(claim, limit);
    } catch (const std::exception& e) {
        return {"claim " + claim.str() + ": " + e.what(), {}};
    }
}

std::string Preparer::unprepare(const ClaimRef& claim, const CallLimit& limit) {
    try {
        return impl_->unprepare(claim, limit);
    } catch (const std::exception& e) {
        return "claim " + claim.str() + ": " + e.what();
    }
}

std::vector<std::string> Preparer::prepared() const {
    std::lock_guard<std::mutex> l(impl_->mu);
    std::vector<std::string> out;
    for (const auto& [uid, cp] : impl_->claims)
        if (cp.prepared)
            out.push_back(uid);
    return out;
}

}  // namespace vfiod::dra
