#include "metadata.hpp"

#include <nlohmann/json.hpp>

#include "json_fields.hpp"

namespace vfiod::dra {

using nlohmann::json;

namespace {

constexpr const char* kMetadataApiVersion = "metadata.resource.k8s.io/v1alpha1";
constexpr const char* kContainerMetadataDir = "/var/run/kubernetes.io/dra-device-attributes";

}  // namespace

std::string parent_request(const std::string& request) {
    return request.substr(0, request.find('/'));
}

bool safe_request(const std::string& r) {
    auto slash = r.find('/');
    if (slash == std::string::npos)
        return safe_name(r, 63);
    return safe_name(r.substr(0, slash), 63) && safe_name(r.substr(slash + 1), 63);
}

std::string metadata_host_path(const std::string& state_dir, const std::string& claim_uid,
                               const std::string& request, const std::string& driver) {
    return state_dir + "/metadata/" + claim_uid + "/" + request + "/" + driver + "-metadata.json";
}

std::string metadata_container_path(const ResourceClaim& claim, const std::string& request,
                                    const std::string& driver) {
    std::string base = std::string(kContainerMetadataDir) +
                       (claim.pod_claim_name.empty()
                            ? "/resourceclaims/" + claim.name
                            : "/resourceclaimtemplates/" + claim.pod_claim_name);
    return base + "/" + request + "/" + driver + "-metadata.json";
}

bool is_metadata_path(const std::string& f, const std::string& state_dir,
                      const std::string& claim_uid, const std::string& driver) {
    const std::string prefix = state_dir + "/metadata/" + claim_uid + "/";
    const std::string suffix = "/" + driver + "-metadata.json";
    if (f.size() <= prefix.size() + suffix.size() || f.rfind(prefix, 0) != 0 ||
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0)
        return false;
    return safe_name(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size()), 63);
}

std::string metadata_file(const ResourceClaim& claim, const std::string& request,
                          const std::string& driver, const std::string& pool,
                          const std::vector<const DraDevice*>& devices) {
    json list = json::array();
    for (const DraDevice* d : devices) {
        std::vector<std::string> omitted;
        list.push_back({{"driver", driver},
                        {"pool", pool},
                        {"name", d->name},
                        {"attributes", device_attributes(*d, &omitted)}});
    }
    json md = {{"apiVersion", kMetadataApiVersion},
               {"kind", "DeviceMetadata"},
               {"metadata",
                {{"name", claim.name},
                 {"namespace", claim.namespace_},
                 {"uid", claim.uid},
                 {"generation", claim.generation}}}};
    // As the KEP's type: only a claim made from a template has a pod claim name.
    if (!claim.pod_claim_name.empty())
        md["podClaimName"] = claim.pod_claim_name;
    md["requests"] = json::array({{{"name", request}, {"devices", list}}});
    return dump_json(md, 1) + "\n";
}

}  // namespace vfiod::dra
