#include "cdi.hpp"

#include <nlohmann/json.hpp>

#include "json_fields.hpp"

namespace vfiod::dra {

using nlohmann::json;

namespace {

constexpr const char* kCdiKind = "vfiod.io/vfio";
constexpr const char* kCdiVersion = "0.5.0";

json container_edits(const CdiDevice& d) {
    json nodes = json::array();
    for (const auto& n : d.nodes)
        nodes.push_back({{"path", n.path}});
    json mounts = json::array();
    for (const auto& m : d.mounts)
        mounts.push_back({{"hostPath", m.host_path},
                          {"containerPath", m.container_path},
                          {"type", "bind"},
                          {"options", {"ro", "nosuid", "nodev", "bind"}}});
    return {{"deviceNodes", nodes}, {"mounts", mounts}};
}

}  // namespace

std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid) {
    return cdi_dir + "/vfiod.io-vfio-" + claim_uid + ".json";
}

std::string cdi_device_id(const std::string& claim_uid, const std::string& device) {
    return std::string(kCdiKind) + "=" + claim_uid + "-" + device;
}

std::string cdi_spec(const std::vector<CdiDevice>& devices) {
    json list = json::array();
    for (const auto& d : devices)
        list.push_back(
            {{"name", d.claim_uid + "-" + d.device}, {"containerEdits", container_edits(d)}});
    json spec = {{"cdiVersion", kCdiVersion}, {"kind", kCdiKind}, {"devices", list}};
    return dump_json(spec, 1) + "\n";
}

}  // namespace vfiod::dra
