// Kubernetes resource names as vfiod's device plugin exposes them (DESIGN §9): which names the
// kubelet takes, and the socket and environment names each becomes. The config loader and the
// plugin share these, so a name check-config accepts is one the plugin can serve. No I/O.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vfiod {

// What the kubelet refuses in a device plugin's resource name, or "" when it takes it (an
// extended resource name, as Kubernetes' IsExtendedResourceName checks it).
std::string resource_name_problem(std::string_view name);

// "nvidia.com/GH100" -> "vfiod-nvidia_com_GH100.sock": every byte but letters, digits, '_' and
// '-' becomes '_', so "a.b/c" and "a_b/c" share one socket (resource_name_collision()).
std::string plugin_socket_name(std::string_view resource);
// The variables KubeVirt's virt-launcher reads a resource's device IDs from: PCI addresses for a
// resource of functions, mdev UUIDs for one of mediated devices (DESIGN §9, §12).
inline constexpr std::string_view kPciEnvPrefix = "PCI_RESOURCE_";
inline constexpr std::string_view kMdevEnvPrefix = "MDEV_PCI_RESOURCE_";
// "nvidia.com/GH100" -> "PCI_RESOURCE_NVIDIA_COM_GH100", as KubeVirt's virt-launcher reads it:
// '/' and '.' become '_' and letters are upper-cased, so case is lost too.
std::string plugin_env_name(std::string_view resource, std::string_view prefix = kPciEnvPrefix);

// The resource an [[mdev]] entry without resource_name serves its mdevs as (DESIGN §12):
// "vfiod.io/<type>", each byte of the type that a resource name cannot hold ('.', '_' and '-'
// aside from letters and digits) made '_'. Still checked by resource_name_problem(): a type
// that starts with '-' or is longer than 63 bytes needs a resource_name of its own.
std::string default_mdev_resource_name(std::string_view type);

// The kubelet's device plugin directory, where the plugin's sockets live unless told otherwise.
inline constexpr std::string_view kKubeletPluginDir = "/var/lib/kubelet/device-plugins";
// The longest path a unix socket can be bound at: sockaddr_un's sun_path less its NUL.
inline constexpr size_t kMaxSocketPath = 107;

// Why two different resource names cannot both be served, or "": they become one plugin socket
// or one environment variable (of `prefix`: names of one kind).
std::string resource_name_collision(std::string_view a, std::string_view b,
                                    std::string_view prefix = kPciEnvPrefix);
// Why `resource`'s socket does not fit under dir (kKubeletPluginDir by default), or "".
std::string socket_path_problem(std::string_view resource,
                                std::string_view dir = kKubeletPluginDir);

}  // namespace vfiod
