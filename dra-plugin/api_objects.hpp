// The Kubernetes API objects vfiod-dra-plugin reads and writes (DESIGN §10), as typed structs,
// with their JSON, all in this file: the ResourceClaim Prepare reads, the ResourceSlices the
// publisher writes (and a device's attributes, which the device-metadata file repeats), the
// copies of our slices the API server answers and its watch events, and the Node's UID. What the
// server sends is checked where it is read: strict about what the plugin relies on, lenient about
// the rest, bounded in size and depth. Nothing here does I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices.hpp"

namespace vfiod::dra {

// ---- ResourceClaim (resource.k8s.io/v1) ------------------------------------------------------

// A ResourceClaim is a few KiB; the API caps allocation results at 32. Generous bounds, so a
// broken or hostile answer costs bounded time and memory, and nothing legitimate is refused.
constexpr size_t kMaxClaimBytes = 4 << 20;
constexpr size_t kMaxAllocationResults = 256;

// One entry of status.allocation.devices.results.
struct DeviceRequestAllocationResult {
    std::string request, driver, pool, device;
};

// A ResourceClaim as Prepare needs it.
struct ResourceClaim {
    std::string uid, namespace_, name;
    int64_t generation = 0;
    std::string pod_claim_name;  // annotation resource.kubernetes.io/pod-claim-name; may be empty
    bool allocated = false;      // status.allocation present
    std::vector<DeviceRequestAllocationResult> results;  // every driver's
};
using Claim = ResourceClaim;

// Strict about what Prepare relies on, lenient about the rest; false and *err naming the field.
bool parse_claim(const std::string& json, ResourceClaim* out, std::string* err);

// What a Kubernetes name (a namespace, a claim, a request) or a UID may hold where it becomes
// a file name: letters, digits, '-' and, in a name, '.' (never "." or ".." alone); not empty.
bool safe_name(const std::string& s, size_t max = 253);
bool safe_uid(const std::string& s);

// ---- ResourceSlice (resource.k8s.io/v1) ------------------------------------------------------

// The API's limits: devices in one ResourceSlice, and characters in a string attribute value. A
// longer value is left out and logged once (never a rejected slice).
constexpr size_t kMaxDevicesPerSlice = 128;
constexpr size_t kMaxStringAttribute = 64;
// The API's limit for a slice that holds a tainted device (or one consuming counters):
// resource.k8s.io/v1 ResourceSliceMaxDevicesWithAdvancedFeatures.
constexpr size_t kMaxDevicesPerTaintedSlice = 64;
// Devices the plugin puts in one slice: the tainted slice's limit, always (DESIGN §10). A taint
// (a failed device, DESIGN §13) then never changes how the pool is cut: no device moves to
// another slice because another is tainted.
constexpr size_t kDevicesPerSlice = 64;
static_assert(kDevicesPerSlice == kMaxDevicesPerTaintedSlice);
static_assert(kDevicesPerSlice <= kMaxDevicesPerSlice);
// The effect of the kTaintKey taint (device_health.hpp): no new claim gets the device unless it
// tolerates the taint; a pod already running on it keeps it.
constexpr const char* kTaintEffect = "NoSchedule";

// A device's attributes by qualified name: {"int": 13} or {"string": "0000:01:00.0"} in JSON.
using DeviceAttributes = std::map<std::string, std::variant<int64_t, std::string>>;

// A function: "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot" (absent when
// unknown), and under the driver's own domain, unqualified: resourceName (absent when empty),
// vendor, device, class (hex as in DESIGN §5: "10de"), iommuGroup, numaNode (absent when -1),
// driver. An mdev (DESIGN §12): mdevUUID (the unqualified name KubeVirt's virt-launcher reads
// before it looks for pciBusID), type, typeName, resourceName, iommuGroup, numaNode, and its PCI
// parent's pcieRoot; never pciBusID, which would name the parent GPU.
// A string value over kMaxStringAttribute is left out and its name appended to *omitted.
DeviceAttributes attributes_of(const DraDevice& d, std::vector<std::string>* omitted);
nlohmann::json to_json(const DeviceAttributes& attributes);
// to_json(attributes_of(d, omitted)).
nlohmann::json device_attributes(const DraDevice& d, std::vector<std::string>* omitted);

// This node's pool.
struct Pool {
    std::string driver;    // "vfio.vfiod.io"
    std::string node;      // the node's name = the pool's name
    std::string node_uid;  // for the owner reference; empty: no owner reference
    int64_t generation = 1;
};

// The name of the pool's slice number `index`: "<node>-<driver>-<index>", a valid DNS
// subdomain of at most 253 characters (a long node name is cut and a hash of it appended).
std::string slice_name(const Pool& pool, size_t index);

// A ResourceSlice as the plugin writes it (whole, without resourceVersion).
struct ResourceSlice {
    struct Device {
        std::string name;
        DeviceAttributes attributes;
        // The value of its kTaintKey taint (taint_value() of its health); "": no taints.
        std::string taint;
    };
    std::string name;
    std::string owner_node_uid;  // metadata.ownerReferences: the Node; empty: none
    std::string driver, node_name;
    std::string pool;  // spec.pool: its name, generation and resourceSliceCount
    int64_t generation = 1;
    int64_t slice_count = 1;
    std::vector<Device> devices;
};
nlohmann::json to_json(const ResourceSlice& slice);

// The pool's ResourceSlices: devices in name order, kDevicesPerSlice a slice, the Node as
// owner, a failed device tainted (DESIGN §13). No devices: no slices. Attributes left out are
// appended to *omitted as "<device>: <attribute>".
std::vector<ResourceSlice> pool_slices(const std::vector<DraDevice>& devices, const Pool& pool,
                                       std::vector<std::string>* omitted);
// The same as JSON.
std::vector<nlohmann::json> make_slices(const std::vector<DraDevice>& devices, const Pool& pool,
                                        std::vector<std::string>* omitted);

// A slice to write, with its JSON made once: a pass compares it with the server's copy, then
// writes it only if they differ.
struct SliceToWrite {
    std::string name;
    nlohmann::json object;
};
SliceToWrite to_write(const ResourceSlice& slice);

// ---- what the API server answers -------------------------------------------------------------

// A ResourceSlice as the API server has it: what the publisher reads of it, and the object
// whole (what the server adds to what we wrote, defaults and metadata, is no difference).
struct ServerSlice {
    std::string name, resource_version;
    std::string node_name, driver;      // spec.nodeName, spec.driver
    std::optional<int64_t> generation;  // spec.pool.generation, when an int64 from 0 up
    nlohmann::json object;
};
ServerSlice server_slice(nlohmann::json object);
// None when the body is not a JSON object.
std::optional<ServerSlice> parse_server_slice(const std::string& body);

// Whether `have` holds `want`'s spec and owner: every member want has is there with the same
// value (arrays: same length, element by element).
bool holds(const ServerSlice& have, const SliceToWrite& want);
// Whether the server's answer to writing `sent` lacks a device taint that `sent` carries: the
// API server drops the field where its DRADeviceTaints feature gate is off (DESIGN §13).
bool taints_dropped(const ServerSlice& got, const SliceToWrite& sent);
// The bodies of a POST, and of a PUT over the copy of resourceVersion `resource_version`.
std::string create_body(const SliceToWrite& want);
std::string update_body(const SliceToWrite& want, const std::string& resource_version);

// resourceVersions are opaque to clients, but every API server in use hands out decimal
// integers: whether `incoming` is older than `have` where both are numbers (a watch event that
// lags behind the answer to our own write); false when they are not comparable.
bool older(const std::string& incoming, const std::string& have);

// A ResourceSliceList.
struct SliceList {
    std::string resource_version;
    std::vector<ServerSlice> items;
};
// False: garbage, or not a list.
bool parse_slice_list(const std::string& body, SliceList* out);

// One line of a watch of ResourceSlices.
struct WatchEvent {
    enum class Type { Added, Modified, Deleted, Bookmark, Error };
    Type type = Type::Error;
    ServerSlice object;          // ADDED, MODIFIED, DELETED: named; BOOKMARK: its resourceVersion
    std::optional<int64_t> code;  // ERROR: the Status's code (410: the history is compacted)
    std::string message;          // ERROR: the Status's message
};
// None when the line is garbage: not JSON, no object, an unknown type, an object unnamed.
std::optional<WatchEvent> parse_watch_event(const std::string& line);

// A Node's metadata.uid; "" when the body is no Node with one.
std::string parse_node_uid(const std::string& body);

}  // namespace vfiod::dra
