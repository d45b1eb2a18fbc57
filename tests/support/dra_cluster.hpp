// The cluster's side of vfiod-dra-plugin's end-to-end runs, shared by
// tests/integration/test_dra_scenarios and bench/dra_plugin_bench: the node and driver they use,
// a ResourceClaim as the scheduler leaves it allocated, and the node's pool as the fake API
// server holds it (its slices, and whether it is settled: what a scheduler would take).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_apiserver.hpp"
#include "kube_api.hpp"

namespace vfiod::test {

inline constexpr char kNode[] = "node-1";
inline constexpr char kNodeUid[] = "6b1f0d52-1c3e-4d8e-9a57-000000000001";
inline constexpr char kDriver[] = "vfio.vfiod.io";

// The Node the plugin's slices are owned by, added to the fake API server.
inline dra::ApiResponse add_this_node(FakeApiServer& api) {
    return api.control("POST", "/_fake/nodes",
                       nlohmann::json{{"apiVersion", "v1"},
                                      {"kind", "Node"},
                                      {"metadata", {{"name", kNode}, {"uid", kNodeUid}}}}
                           .dump());
}

// A ResourceClaim (resource.k8s.io/v1) allocated on this node's pool: one result per
// {request, device}; `pod_claim_name` for one made from a template.
struct Alloc {
    std::string request, device;
};
inline nlohmann::json claim_json(const std::string& name, const std::string& uid,
                                 const std::vector<Alloc>& allocs,
                                 const std::string& pod_claim_name = "") {
    using json = nlohmann::json;
    json requests = json::array(), results = json::array();
    std::set<std::string> seen;
    for (const auto& a : allocs) {
        if (seen.insert(a.request).second)
            requests.push_back({{"name", a.request},
                                {"exactly", {{"deviceClassName", kDriver},
                                             {"allocationMode", "ExactCount"},
                                             {"count", 1}}}});
        results.push_back(
            {{"request", a.request}, {"driver", kDriver}, {"pool", kNode}, {"device", a.device}});
    }
    json meta = {{"name", name}, {"namespace", "default"}, {"uid", uid}, {"generation", 1},
                 {"resourceVersion", "1"}};
    if (!pod_claim_name.empty())
        meta["annotations"] = {{"resource.kubernetes.io/pod-claim-name", pod_claim_name}};
    json selector = {
        {"nodeSelectorTerms",
         {{{"matchFields",
            {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {kNode}}}}}}}}};
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"metadata", meta},
            {"spec", {{"devices", {{"requests", requests}}}}},
            {"status",
             {{"allocation", {{"devices", {{"results", results}}}, {"nodeSelector", selector}}},
              {"reservedFor",
               {{{"resource", "pods"}, {"name", "virt-launcher-" + name}, {"uid", uid + "-pod"}}}}}}};
}

// The node's ResourceSlices on the API server; nullopt when the list failed.
inline std::optional<std::vector<nlohmann::json>> node_slices(FakeApiServer& api) {
    auto r = api.control("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" +
                                    dra::query_escape(std::string("spec.nodeName=") + kNode),
                         "");
    if (r.status != 200)
        return std::nullopt;
    try {
        const nlohmann::json list = nlohmann::json::parse(r.body);
        std::vector<nlohmann::json> out;
        for (const auto& s : list.at("items"))
            out.push_back(s);
        return out;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// The pool as the scheduler takes it: every slice of one generation, as many slices as their
// resourceSliceCount says, and together exactly `names`, none twice. While the plugin rewrites
// the pool (one release can move devices between slices) it is not settled.
inline bool pool_settled(FakeApiServer& api, const std::set<std::string>& names) {
    auto ss = node_slices(api);
    if (!ss)
        return false;
    if (ss->empty())
        return names.empty();
    std::set<int64_t> generations;
    std::set<std::string> seen;
    for (const auto& s : *ss) {
        const nlohmann::json& pool = s["spec"]["pool"];
        generations.insert(pool.value("generation", int64_t{-1}));
        if (pool.value("resourceSliceCount", int64_t{-1}) != static_cast<int64_t>(ss->size()))
            return false;
        for (const auto& d : s["spec"].value("devices", nlohmann::json::array()))
            if (!seen.insert(d.value("name", "")).second)
                return false;
    }
    return generations.size() == 1 && seen == names;
}

}  // namespace vfiod::test
