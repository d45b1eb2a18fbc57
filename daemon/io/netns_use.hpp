// Network functions whose interface lives in another network namespace: a pod's SR-IOV VF, a
// container's NIC. sysfs shows a reader only its own namespace's netdevs, so such a function looks
// unused; unbinding it pulls the interface from under the pod (in-use-network, DESIGN §4).
//
// Seeing inside another namespace would take setns (CAP_SYS_ADMIN, and the unit has
// RestrictNamespaces=yes) or rtnetlink with IFLA_TARGET_NETNSID (CAP_NET_ADMIN over it, and an id
// that assigning would itself change the host). So the finding rests on what needs neither: a
// network function bound to a network driver that shows no netdev here is in use. The namespace is
// named from what a process in it shows without new privileges: its /proc/<pid>/root/sys (a
// container or `ip netns exec` mounts sysfs in its own namespace), and /run/netns names matched by
// the namespace inode.
#pragma once

#include <string>
#include <vector>

#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// A function's netdev directories: <devpath>/net and, for virtio-net, <devpath>/virtio<N>/net.
std::vector<std::string> net_dirs(const HostFs& fs, const std::string& devpath);

// A network namespace other than the host's (PID 1's), as the host shows it.
struct Netns {
    unsigned long inode = 0;
    std::vector<std::string> names;  // its /run/netns names, if any
    std::string pid;                 // a process in it ("" for a named one nobody runs in)
};

// Named namespaces (PID 1's /run/netns, else the root's run/netns) and those processes hold
// (proc/*/ns/net), one entry per inode, the host's own left out. Sorted by inode.
std::vector<Netns> list_netns(const HostFs& fs);

// Adds to use->network, for every network-class function on a network driver without a netdev
// in the host's namespace, "its interface is in another network namespace …", naming the
// namespace and interface where a process in it shows them. Live host: any such function; a
// tree: only one whose `net` directory is present but empty (what a capture of it shows).
void find_netns_use(const HostFs& fs, const Topology& topo, HostUse* use);

}  // namespace vfiod
