#include "prepare.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

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

namespace {

// One device of the claim that this driver serves, and the requests it was allocated for.
struct ClaimDevice {
    const DraDevice* device = nullptr;
    std::vector<std::string> requests;
};
using ClaimDevices = std::map<std::string, ClaimDevice>;  // by device name

// What one Prepare will write: the checkpoint's devices and files, and each file's content.
struct Plan {
    Checkpoint cp;
    std::vector<std::pair<std::string, std::string>> files;  // host path, content
};

// The requests the pod names among `requests` (a subrequest's parent), each once, in order.
std::set<std::string> parents(const std::vector<std::string>& requests) {
    std::set<std::string> out;
    for (const auto& r : requests)
        out.insert(parent_request(r));
    return out;
}

std::vector<GroupReservations::Want> wants_of(const Checkpoint& cp) {
    std::vector<GroupReservations::Want> wants;
    for (const auto& d : cp.devices)
        wants.push_back({d.group, d.answer.device, d.address});
    return wants;
}

bool lists(const std::vector<std::string>& files, const std::string& f) {
    return std::find(files.begin(), files.end(), f) != files.end();
}

}  // namespace

struct Preparer::Impl {
    Options o;
    KubeApi& api;
    InventoryFn inventory;
    StateFiles files;
    CheckpointStore store;
    GroupReservations groups;

    mutable std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, Checkpoint> claims;  // by UID: prepared, or intent left by a crash
    std::set<std::string> busy;                // UIDs a call is working on

    Impl(Options opts, KubeApi& a, InventoryFn inv, const HostFs& host)
        : o(std::move(opts)),
          api(a),
          inventory(std::move(inv)),
          files(host),
          store({o.driver, o.cdi_dir, o.state_dir}, files) {}

    // The claim's turn, taken by take() and given back when this goes.
    struct Turn {
        Impl& i;
        const std::string& uid;
        ~Turn() { i.give_back(uid); }
    };

    bool take(const std::string& uid, const CallLimit& call, std::string* err);
    void give_back(const std::string& uid);
    std::optional<Checkpoint> recorded(const std::string& uid) const;
    std::string read_claim(const ClaimRef& ref, const CallLimit& call, ResourceClaim* claim);
    std::string our_devices(const ResourceClaim& claim, const DraInventory& inv,
                            ClaimDevices* out) const;
    Plan make_plan(const ClaimRef& ref, const ResourceClaim& claim, const ClaimDevices& devices,
                   const DraInventory& inv) const;
    std::map<std::string, std::string> add_metadata_files(const ResourceClaim& claim,
                                                          const ClaimDevices& devices,
                                                          Plan* plan) const;
    void add_cdi_spec(const ResourceClaim& claim, const DraInventory& inv,
                      const std::map<std::string, std::string>& metadata, Plan* plan) const;
    PrepareResult write(const ClaimRef& ref, const Plan& plan,
                        const std::optional<Checkpoint>& old);
    PrepareResult undo(const ClaimRef& ref, const Checkpoint& intent, const std::string& why);

    PrepareResult prepare(const ClaimRef& ref, const CallLimit& call);
    std::string unprepare(const ClaimRef& ref, const CallLimit& call);
    bool load(std::string* err);
};

// Takes the claim for this call: a second call for the same claim waits for the first, so two
// never write the same files. Bounded, and by the call's deadline: a call stuck on a hung disk
// does not hold the kubelet's next call for ever.
bool Preparer::Impl::take(const std::string& uid, const CallLimit& call, std::string* err) {
    std::unique_lock<std::mutex> l(mu);
    auto wait = call.left(o.request_timeout * 3 + std::chrono::seconds(30));
    if (!cv.wait_for(l, wait, [&] { return !busy.count(uid); })) {
        *err = "another Prepare or Unprepare of this claim is still running";
        return false;
    }
    busy.insert(uid);
    return true;
}

void Preparer::Impl::give_back(const std::string& uid) {
    {
        std::lock_guard<std::mutex> l(mu);
        busy.erase(uid);
    }
    cv.notify_all();
}

// The claim's checkpoint: prepared, or the intent a crash left; none when there is none.
std::optional<Checkpoint> Preparer::Impl::recorded(const std::string& uid) const {
    std::lock_guard<std::mutex> l(mu);
    auto it = claims.find(uid);
    return it == claims.end() ? std::nullopt : std::optional(it->second);
}

// The claim as the API server has it, checked against what the kubelet named: "" or why. With
// no lock held: a thousand claims wait for their answers side by side.
std::string Preparer::Impl::read_claim(const ClaimRef& ref, const CallLimit& call,
                                       ResourceClaim* claim) {
    const std::string url = "/apis/resource.k8s.io/v1/namespaces/" + ref.namespace_ +
                            "/resourceclaims/" + ref.name;
    const auto timeout = call.left(o.request_timeout);
    if (std::string why = call.over(); !why.empty() || timeout.count() == 0)
        return "not read from the API server: " +
               (why.empty() ? "the kubelet's call has no time left" : why);
    // Cut off at kMaxClaimBytes as it streams in, not after it was read whole.
    ApiResponse resp = api.request("GET", url, "", timeout, kMaxClaimBytes);
    if (!resp.ok())
        return "GET " + url + ": " + resp.describe();
    std::string err;
    if (!parse_claim(resp.body, claim, &err))
        return "the API server's answer to GET " + url + ": " + err;
    if (claim->uid != ref.uid)
        return "the API server has UID " + printable(claim->uid) +
               " for it, not the kubelet's (deleted and made again?)";
    // Its name becomes the container path of the metadata file: the one the kubelet named.
    if (claim->namespace_ != ref.namespace_ || claim->name != ref.name)
        return "the API server answered for " + printable(claim->namespace_) + "/" +
               printable(claim->name);
    if (!claim->allocated)
        return "not allocated (status.allocation is missing)";
    return "";
}

// The claim's results of this driver, by device (a device may serve several requests), each
// published by vfiod on this node now: "" or why not.
std::string Preparer::Impl::our_devices(const ResourceClaim& claim, const DraInventory& inv,
                                        ClaimDevices* out) const {
    for (const auto& r : claim.results) {
        if (r.driver != o.driver)
            continue;
        const std::string dev = printable(r.device);
        if (r.pool != o.node)
            return "device " + dev + " is allocated to node " + printable(r.pool) +
                   "'s pool, not to this node's (" + o.node + ")";
        if (!safe_request(r.request))
            return "request name '" + printable(r.request) + "' is not a request name";
        const DraDevice* d = inv.find(r.device);
        if (!d && r.device.starts_with("mdev-"))
            return "device " + dev + " was withdrawn between scheduling and Prepare: vfiod no "
                   "longer publishes it ready with its /dev/vfio node";
        if (!d) {
            auto a = parse_device_name(r.device);
            return "device " + dev + (a ? " (" + a->str() + ")" : std::string()) +
                   " was released between scheduling and Prepare: vfiod no longer publishes it "
                   "as bound";
        }
        ClaimDevice& cd = (*out)[r.device];
        if (!lists(cd.requests, r.request))
            cd.requests.push_back(r.request);
        cd.device = d;
    }
    if (out->empty())
        return "no device of it is allocated by driver " + o.driver;
    return "";
}

// The plan: the checkpoint's devices, the metadata files (one per request), the CDI spec.
Plan Preparer::Impl::make_plan(const ClaimRef& ref, const ResourceClaim& claim,
                               const ClaimDevices& devices, const DraInventory& inv) const {
    Plan plan;
    plan.cp.claim = ref;
    for (const auto& [name, cd] : devices)
        plan.cp.devices.push_back({{cd.requests, o.node, name, {cdi_device_id(ref.uid, name)}},
                                   cd.device->group,
                                   cd.device->host_id()});
    add_cdi_spec(claim, inv, add_metadata_files(claim, devices, &plan), &plan);
    for (const auto& f : plan.files)
        plan.cp.files.push_back(f.first);
    return plan;
}

// One file per request the pod names, listing its devices; their host paths by request.
std::map<std::string, std::string> Preparer::Impl::add_metadata_files(
    const ResourceClaim& claim, const ClaimDevices& devices, Plan* plan) const {
    std::map<std::string, std::vector<const DraDevice*>> by_request;
    for (const auto& [name, cd] : devices)
        for (const auto& p : parents(cd.requests))
            by_request[p].push_back(cd.device);
    std::map<std::string, std::string> paths;
    for (const auto& [request, listed] : by_request) {
        std::string host_path = metadata_host_path(o.state_dir, claim.uid, request, o.driver);
        paths[request] = host_path;
        plan->files.emplace_back(host_path,
                                 metadata_file(claim, request, o.driver, o.node, listed));
    }
    return paths;
}

// Each device's nodes (a function's whole group's, an mdev's own), and its requests' metadata
// files bound in.
void Preparer::Impl::add_cdi_spec(const ResourceClaim& claim, const DraInventory& inv,
                                  const std::map<std::string, std::string>& metadata,
                                  Plan* plan) const {
    std::vector<CdiDevice> devices;
    for (const auto& cd : plan->cp.devices) {
        CdiDevice d{claim.uid, cd.answer.device,
                    device_nodes(*inv.find(cd.answer.device), inv.snapshot, files.host()), {}};
        for (const auto& p : parents(cd.answer.requests))
            d.mounts.push_back({metadata.at(p), metadata_container_path(claim, p, o.driver)});
        devices.push_back(std::move(d));
    }
    plan->files.emplace_back(cdi_spec_path(o.cdi_dir, claim.uid), cdi_spec(devices));
}

// Intent first (every file this call or a crashed one may have written), then the files, then
// the checkpoint final: a SIGKILL anywhere leaves what a retry or Unprepare finishes.
PrepareResult Preparer::Impl::write(const ClaimRef& ref, const Plan& plan,
                                    const std::optional<Checkpoint>& old) {
    Checkpoint intent = plan.cp;
    if (old)
        for (const auto& f : old->files)
            if (!lists(intent.files, f))
                intent.files.push_back(f);
    if (std::string e = store.write(intent); !e.empty())
        return undo(ref, intent, e);
    for (const auto& [host_path, content] : plan.files)
        if (std::string e = files.write(host_path, content, 0644); !e.empty())
            return undo(ref, intent, e);
    if (old)  // a crashed attempt's files that this one does not write
        for (const auto& f : old->files)
            if (!lists(plan.cp.files, f))
                if (std::string e = files.remove(f); !e.empty())
                    return undo(ref, intent, e);
    Checkpoint done = plan.cp;
    done.prepared = true;
    if (std::string e = store.write(done); !e.empty())
        return undo(ref, intent, e);
    std::lock_guard<std::mutex> l(mu);
    claims[ref.uid] = done;
    return {"", done.answer()};
}

PrepareResult Preparer::Impl::undo(const ClaimRef& ref, const Checkpoint& intent,
                                   const std::string& why) {
    const std::string who = "claim " + ref.str();
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
}

PrepareResult Preparer::Impl::prepare(const ClaimRef& ref, const CallLimit& call) {
    const std::string who = "claim " + ref.str();
    if (!safe_uid(ref.uid) || !safe_name(ref.namespace_) || !safe_name(ref.name))
        return {who + ": the UID, namespace or name cannot be a Kubernetes one", {}};
    std::string err;
    if (!take(ref.uid, call, &err))
        return {who + ": " + err, {}};
    Turn turn{*this, ref.uid};
    // Answered from the checkpoint, without asking the inventory again: the kubelet retries
    // Prepare for pods that already run (after its own restart, say), and refusing them because
    // vfiod is restarting would not undo what they hold.
    std::optional<Checkpoint> old = recorded(ref.uid);  // or the intent a crash left
    if (old && old->prepared)
        return {"", old->answer()};
    ResourceClaim claim;
    if (std::string e = read_claim(ref, call, &claim); !e.empty())
        return {who + ": " + e, {}};
    std::shared_ptr<const DraInventory> inv = inventory();
    if (!inv)
        return {who + ": vfiod's inventory is not known yet (is vfiod running?)", {}};
    ClaimDevices devices;
    if (std::string e = our_devices(claim, *inv, &devices); !e.empty())
        return {who + ": " + e, {}};
    Plan plan = make_plan(ref, claim, devices, *inv);
    if (std::string e = groups.reserve(ref, wants_of(plan.cp)); !e.empty())
        return {who + ": " + e, {}};
    return write(ref, plan, old);
}

std::string Preparer::Impl::unprepare(const ClaimRef& ref, const CallLimit& call) {
    const std::string who = "claim " + ref.str();
    if (!safe_uid(ref.uid))
        return who + ": the UID cannot be a Kubernetes one";
    std::string err;
    if (!take(ref.uid, call, &err))
        return who + ": " + err;
    Turn turn{*this, ref.uid};
    std::optional<Checkpoint> cp = recorded(ref.uid);
    if (!cp)
        return "";  // never prepared, or already unprepared
    if (std::string e = store.remove(*cp); !e.empty())
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
        for (const auto& d : cp.devices)
            GroupReservations::add(&held, cp.claim, d.group, d.address);
        if (!cp.prepared)
            spdlog::info("claim {} was being prepared when the plugin stopped: a retried Prepare "
                         "finishes it, Unprepare removes it", cp.claim.str());
        const std::string uid = cp.claim.uid;
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
