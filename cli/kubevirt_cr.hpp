// What vfioctl doctor --kubevirt-cr reads of a KubeVirt CR (DESIGN §12): the fields that decide
// which mediated devices KubeVirt's virt-handler removes (KubeVirt v1.9.0,
// pkg/virt-handler/device-manager/mediated_devices_types.go and pkg/virt-config).
#pragma once

#include <optional>
#include <set>
#include <string>

namespace vfiod::cli {

// The largest CR file read; a CR with every field KubeVirt has is a few kilobytes.
inline constexpr size_t kMaxKubevirtCrBytes = 4 << 20;

// KubeVirt's feature gate that turns virt-handler's creation and removal of mdevs off: from
// v1.0.0, deprecated since v1.8.0 (still honoured by v1.9), where
// mediatedDevicesConfiguration.enabled replaces it and, when set, wins over it.
inline constexpr const char* kDisableMdevGate = "DisableMDEVConfiguration";

struct KubevirtMdevConfig {
    // The types virt-handler keeps, each with spaces as '_' as it compares them: those of
    // spec.configuration.mediatedDevicesConfiguration (mediatedDeviceTypes, the deprecated
    // mediatedDevicesTypes, and every nodeMediatedDeviceTypes entry's, whatever its node
    // selector), and the mdevNameSelector of each externalResourceProvider: true entry of
    // permittedHostDevices.mediatedDevices.
    std::set<std::string> configured;
    std::set<std::string> external;
    bool node_types = false;  // nodeMediatedDeviceTypes has an entry (counted for every node)
    bool gate = false;        // kDisableMdevGate is in developerConfiguration.featureGates
    std::optional<bool> enabled;  // mediatedDevicesConfiguration.enabled, when set

    // Whether virt-handler leaves mdevs alone: `enabled` when set, else the gate.
    bool handling_off() const { return enabled ? !*enabled : gate; }
};

// A type name as virt-handler compares it: every space as '_', then surrounding white space
// trimmed.
std::string kubevirt_type_key(const std::string& name);

// The KubeVirt object of `text` (YAML or JSON, as `kubectl get kubevirt -o yaml|json` prints it:
// the object, a List holding it, or several documents of which one is it). nullopt with *error
// ("FILE:LINE:COLUMN: why", FILE as `file`) when the text is no YAML, holds no KubeVirt object
// or more than one, the object has no spec, or a field read has the wrong type.
std::optional<KubevirtMdevConfig> parse_kubevirt_cr(const std::string& text,
                                                    const std::string& file, std::string* error);

// The file read (a regular file of at most kMaxKubevirtCrBytes) and parsed; errors name it.
std::optional<KubevirtMdevConfig> read_kubevirt_cr(const std::string& file, std::string* error);

}  // namespace vfiod::cli
