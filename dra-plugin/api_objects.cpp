#include "api_objects.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <set>

#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "device_health.hpp"
#include "json_fields.hpp"

namespace vfiod::dra {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;
constexpr const char* kPodClaimAnnotation = "resource.kubernetes.io/pod-claim-name";
constexpr size_t kMaxSubdomain = 253;

// ---- ResourceClaim ----

bool parse_claim_metadata(const json& j, ResourceClaim* c, std::string* err) {
    const json* md = field(j, "metadata");
    if (!md || !md->is_object()) {
        *err = "metadata is missing or not an object";
        return false;
    }
    if (!required_string(*md, "uid", "metadata", &c->uid, err) ||
        !required_string(*md, "name", "metadata", &c->name, err) ||
        !required_string(*md, "namespace", "metadata", &c->namespace_, err))
        return false;
    if (const json* g = field(*md, "generation"); g && g->is_number_integer())
        c->generation = g->get<int64_t>();
    if (const json* ann = field(*md, "annotations"); ann && ann->is_object())
        if (const json* p = field(*ann, kPodClaimAnnotation)) {
            // It names a directory the container sees: only a pod's claim name can be there.
            if (!p->is_string() || !safe_name(p->get_ref<const std::string&>(), 253)) {
                *err = std::string("metadata.annotations[") + kPodClaimAnnotation +
                       "] is not a claim name";
                return false;
            }
            c->pod_claim_name = p->get<std::string>();
        }
    return true;
}

bool parse_result(const json& r, const std::string& where, DeviceRequestAllocationResult* d,
                  std::string* err) {
    if (!r.is_object()) {
        *err = where + " is not an object";
        return false;
    }
    return required_string(r, "request", where, &d->request, err) &&
           required_string(r, "driver", where, &d->driver, err) &&
           required_string(r, "pool", where, &d->pool, err) &&
           required_string(r, "device", where, &d->device, err);
}

// status.allocation, when there is one.
bool parse_allocation(const json& j, ResourceClaim* c, std::string* err) {
    const json* status = field(j, "status");
    const json* alloc = field(status, "allocation");
    if (status && !status->is_object()) {
        *err = "status is not an object";
        return false;
    }
    if (!alloc)
        return true;
    if (!alloc->is_object()) {
        *err = "status.allocation is not an object";
        return false;
    }
    c->allocated = true;
    const json* devices = field(*alloc, "devices");
    if (devices && !devices->is_object()) {
        *err = "status.allocation.devices is not an object";
        return false;
    }
    const json* results = field(devices, "results");
    if (results && (!results->is_array() || results->size() > kMaxAllocationResults)) {
        *err = "status.allocation.devices.results is not a list of at most " +
               std::to_string(kMaxAllocationResults);
        return false;
    }
    for (size_t i = 0; results && i < results->size(); ++i) {
        DeviceRequestAllocationResult d;
        if (!parse_result((*results)[i],
                          "status.allocation.devices.results[" + std::to_string(i) + "]", &d,
                          err))
            return false;
        c->results.push_back(std::move(d));
    }
    return true;
}

// ---- ResourceSlice ----

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// FNV-1a, 64 bits: a slice name must come out the same in every run and on every build (no
// std::hash, whose value is the library's business).
uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

// `s` as a DNS subdomain (RFC 1123, as Kubernetes checks object names): lower case, labels of
// [a-z0-9-] that start and end with a letter or digit, separated by single dots. Anything else
// becomes one '-' between alphanumerics, or goes.
std::string subdomain_form(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
        bool prev_alnum = !out.empty() && lower_alnum(out.back());
        if (lower_alnum(c))
            out += c;
        else if (prev_alnum)
            out += c == '.' ? '.' : '-';
    }
    while (!out.empty() && !lower_alnum(out.back()))
        out.pop_back();
    return out;
}

// Every member `want` has is in `have` with the same value (arrays: same length, element by
// element): what the server adds (defaults, metadata) is not a difference.
bool contains(const json& have, const json& want) {
    if (want.is_object()) {
        if (!have.is_object())
            return false;
        for (auto it = want.begin(); it != want.end(); ++it) {
            auto h = have.find(it.key());
            if (h == have.end() || !contains(*h, it.value()))
                return false;
        }
        return true;
    }
    if (want.is_array()) {
        if (!have.is_array() || have.size() != want.size())
            return false;
        for (size_t i = 0; i < want.size(); ++i)
            if (!contains(have[i], want[i]))
                return false;
        return true;
    }
    return have == want;
}

std::string meta_string(const json& obj, const char* key) {
    return string_at(field(field(obj, "metadata"), key));
}

// spec.pool.generation of a slice, when it is one the API can hold (an int64 from 0 up); a
// float, a string, a negative or a larger number from a broken server is none.
std::optional<int64_t> pool_generation(const json& slice) {
    const json* g = field(field(field(slice, "spec"), "pool"), "generation");
    if (g && g->is_number_unsigned() &&
        g->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()))
        return int64_t(g->get<uint64_t>());
    return std::nullopt;  // nlohmann takes every number from 0 up as unsigned
}

std::optional<uint64_t> rv_number(const std::string& rv) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), v);
    if (ec != std::errc() || p != rv.data() + rv.size() || rv.empty())
        return std::nullopt;
    return v;
}

std::optional<WatchEvent::Type> event_type(const std::string& type) {
    using T = WatchEvent::Type;
    static const std::map<std::string, T> kTypes = {{"ADDED", T::Added},
                                                    {"MODIFIED", T::Modified},
                                                    {"DELETED", T::Deleted},
                                                    {"BOOKMARK", T::Bookmark},
                                                    {"ERROR", T::Error}};
    auto it = kTypes.find(type);
    return it == kTypes.end() ? std::nullopt : std::optional(it->second);
}

}  // namespace

bool parse_claim(const std::string& text, ResourceClaim* out, std::string* err) {
    if (text.size() > kMaxClaimBytes) {
        *err = "the claim is larger than " + std::to_string(kMaxClaimBytes) + " bytes";
        return false;
    }
    if (too_deep(text, kMaxJsonDepth)) {
        *err = "the claim nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
        return false;
    }
    json j = parse_json(text);
    if (j.is_discarded() || !j.is_object()) {
        *err = j.is_discarded() ? "the claim is not valid JSON" : "the claim is not a JSON object";
        return false;
    }
    ResourceClaim c;
    if (!parse_claim_metadata(j, &c, err) || !parse_allocation(j, &c, err))
        return false;
    *out = std::move(c);
    return true;
}

bool safe_name(const std::string& s, size_t max) {
    if (s.empty() || s.size() > max || s == "." || s == "..")
        return false;
    for (char c : s)
        if (!(ascii_alnum(c) || c == '-' || c == '.'))
            return false;
    return true;
}

bool safe_uid(const std::string& s) {
    if (s.empty() || s.size() > 128)
        return false;
    for (char c : s)
        if (!(ascii_alnum(c) || c == '-'))
            return false;
    return true;
}

DeviceAttributes attributes_of(const DraDevice& d, std::vector<std::string>* omitted) {
    DeviceAttributes a;
    auto str = [&](const std::string& key, const std::string& value) {
        if (value.size() > kMaxStringAttribute) {
            if (omitted)
                omitted->push_back(key);
            return;
        }
        a[key] = value;
    };
    if (d.is_mdev()) {
        str("mdevUUID", d.mdev.uuid);
        str("type", d.mdev.type);
        str("typeName", d.mdev.type_name);
    } else {
        str("resource.kubernetes.io/pciBusID", d.address.str());
    }
    if (!d.pcie_root.empty())
        str("resource.kubernetes.io/pcieRoot", d.pcie_root);
    if (!d.resource_name.empty())
        str("resourceName", d.resource_name);
    if (!d.is_mdev()) {
        str("vendor", hex4(d.ids.vendor));
        str("device", hex4(d.ids.device));
        str("class", hex6(d.ids.class_code));
    }
    a["iommuGroup"] = static_cast<int64_t>(d.group);
    if (d.numa_node >= 0)
        a["numaNode"] = static_cast<int64_t>(d.numa_node);
    if (!d.driver.empty())
        str("driver", d.driver);
    return a;
}

json to_json(const DeviceAttributes& attributes) {
    json a = json::object();
    for (const auto& [key, value] : attributes)
        if (const int64_t* i = std::get_if<int64_t>(&value))
            a[key] = {{"int", *i}};
        else
            a[key] = {{"string", std::get<std::string>(value)}};
    return a;
}

json device_attributes(const DraDevice& d, std::vector<std::string>* omitted) {
    return to_json(attributes_of(d, omitted));
}

std::string slice_name(const Pool& pool, size_t index) {
    const std::string suffix = "-" + std::to_string(index);
    const std::string raw = pool.node + "-" + pool.driver;
    std::string base = subdomain_form(raw);
    if (base == raw && base.size() + suffix.size() <= kMaxSubdomain)
        return base + suffix;
    // Cut or changed: a hash of what was meant keeps two such pools apart.
    char hash[20];
    std::snprintf(hash, sizeof hash, "-%016llx",
                  static_cast<unsigned long long>(fnv1a(pool.node + '\0' + pool.driver)));
    size_t room = kMaxSubdomain - suffix.size() - std::string_view(hash).size();
    if (base.size() > room)
        base.resize(room);
    while (!base.empty() && !lower_alnum(base.back()))
        base.pop_back();
    if (base.empty())
        return std::string("pool") + hash + suffix;
    return base + hash + suffix;
}

json to_json(const ResourceSlice& s) {
    json devices = json::array();
    for (const auto& d : s.devices) {
        json device = {{"name", d.name}, {"attributes", to_json(d.attributes)}};
        if (!d.taint.empty())
            device["taints"] = json::array(
                {{{"key", kTaintKey}, {"value", d.taint}, {"effect", kTaintEffect}}});
        devices.push_back(std::move(device));
    }
    json meta = {{"name", s.name}};
    if (!s.owner_node_uid.empty())
        meta["ownerReferences"] = json::array({{{"apiVersion", "v1"},
                                                {"kind", "Node"},
                                                {"name", s.node_name},
                                                {"uid", s.owner_node_uid},
                                                {"controller", true}}});
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceSlice"},
            {"metadata", std::move(meta)},
            {"spec",
             {{"driver", s.driver},
              {"nodeName", s.node_name},
              {"pool",
               {{"name", s.pool},
                {"generation", s.generation},
                {"resourceSliceCount", s.slice_count}}},
              {"devices", std::move(devices)}}}};
}

std::vector<ResourceSlice> pool_slices(const std::vector<DraDevice>& devices, const Pool& pool,
                                       std::vector<std::string>* omitted) {
    std::vector<const DraDevice*> sorted;
    sorted.reserve(devices.size());
    for (const auto& d : devices)
        sorted.push_back(&d);
    std::sort(sorted.begin(), sorted.end(),
              [](const DraDevice* a, const DraDevice* b) { return a->name < b->name; });
    std::vector<ResourceSlice> slices;
    const size_t count = (sorted.size() + kDevicesPerSlice - 1) / kDevicesPerSlice;
    for (size_t i = 0; i < count; ++i) {
        ResourceSlice s{.name = slice_name(pool, i),
                        .owner_node_uid = pool.node_uid,
                        .driver = pool.driver,
                        .node_name = pool.node,
                        .pool = pool.node,
                        .generation = pool.generation,
                        .slice_count = static_cast<int64_t>(count),
                        .devices = {}};
        const size_t end = std::min(sorted.size(), (i + 1) * kDevicesPerSlice);
        for (size_t k = i * kDevicesPerSlice; k < end; ++k) {
            std::vector<std::string> left_out;
            s.devices.push_back({sorted[k]->name, attributes_of(*sorted[k], &left_out),
                                 taint_value(sorted[k]->health)});
            if (omitted)
                for (const auto& name : left_out)
                    omitted->push_back(sorted[k]->name + ": " + name);
        }
        slices.push_back(std::move(s));
    }
    return slices;
}

std::vector<json> make_slices(const std::vector<DraDevice>& devices, const Pool& pool,
                              std::vector<std::string>* omitted) {
    std::vector<json> out;
    for (const auto& s : pool_slices(devices, pool, omitted))
        out.push_back(to_json(s));
    return out;
}

SliceToWrite to_write(const ResourceSlice& slice) { return {slice.name, to_json(slice)}; }

ServerSlice server_slice(json object) {
    const json* spec = field(object, "spec");
    ServerSlice s{.name = meta_string(object, "name"),
                  .resource_version = meta_string(object, "resourceVersion"),
                  .node_name = string_at(field(spec, "nodeName")),
                  .driver = string_at(field(spec, "driver")),
                  .generation = pool_generation(object),
                  .object = {}};
    s.object = std::move(object);
    return s;
}

std::optional<ServerSlice> parse_server_slice(const std::string& body) {
    json j = parse_json(body);
    if (!j.is_object())
        return std::nullopt;
    return server_slice(std::move(j));
}

bool holds(const ServerSlice& have, const SliceToWrite& want) {
    const json& w = want.object;
    return contains(have.object,
                    json{{"spec", w["spec"]},
                         {"metadata",
                          {{"ownerReferences",
                            w["metadata"].value("ownerReferences", json::array())}}}});
}

bool taints_dropped(const ServerSlice& got, const SliceToWrite& sent) {
    auto tainted = [](const json& slice) {
        std::set<std::string> names;
        const json* devices = field(field(slice, "spec"), "devices");
        for (size_t i = 0; devices && devices->is_array() && i < devices->size(); ++i)
            if (const json* t = field((*devices)[i], "taints"); t && t->is_array() && !t->empty())
                names.insert(string_at(field((*devices)[i], "name")));
        return names;
    };
    std::set<std::string> have = tainted(got.object), want = tainted(sent.object);
    return !std::includes(have.begin(), have.end(), want.begin(), want.end());
}

std::string create_body(const SliceToWrite& want) { return dump_json(want.object); }

std::string update_body(const SliceToWrite& want, const std::string& resource_version) {
    json body = want.object;
    body["metadata"]["resourceVersion"] = resource_version;
    return dump_json(body);
}

bool older(const std::string& incoming, const std::string& have) {
    auto a = rv_number(incoming), b = rv_number(have);
    return a && b && *a < *b;
}

bool parse_slice_list(const std::string& body, SliceList* out) {
    json list = parse_json(body);
    const json* items = field(list, "items");
    if (list.is_discarded() || !items || !items->is_array())
        return false;
    out->resource_version = meta_string(list, "resourceVersion");
    out->items.clear();
    for (const auto& item : *items)
        out->items.push_back(server_slice(item));
    return true;
}

std::optional<WatchEvent> parse_watch_event(const std::string& line) {
    json ev = parse_json(line);
    if (ev.is_discarded() || !ev.is_object())
        return std::nullopt;
    std::optional<WatchEvent::Type> type = event_type(string_at(field(ev, "type")));
    const json* obj = field(ev, "object");
    if (!type || !obj || !obj->is_object())
        return std::nullopt;
    WatchEvent e;
    e.type = *type;
    if (e.type == WatchEvent::Type::Error) {
        if (const json* code = field(obj, "code"); code && code->is_number_integer())
            e.code = code->get<int64_t>();
        e.message = string_at(field(obj, "message"));
        return e;
    }
    e.object = server_slice(*obj);
    if (e.type != WatchEvent::Type::Bookmark && e.object.name.empty())
        return std::nullopt;
    return e;
}

std::string parse_node_uid(const std::string& body) {
    json node = parse_json(body);
    return node.is_discarded() ? "" : meta_string(node, "uid");
}

}  // namespace vfiod::dra
