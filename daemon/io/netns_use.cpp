#include "io/netns_use.hpp"

#include <map>

#include "core/strings.hpp"
#include "io/host_use.hpp"
#include "io/proc_fds.hpp"

namespace vfiod {

namespace {

// "net:[4026531840]" → 4026531840.
std::optional<unsigned long> ns_inode(const std::string& link) {
    constexpr std::string_view kPrefix = "net:[";
    if (link.size() < kPrefix.size() + 2 || link.compare(0, kPrefix.size(), kPrefix) != 0 ||
        link.back() != ']')
        return std::nullopt;
    std::string digits = link.substr(kPrefix.size(), link.size() - kPrefix.size() - 1);
    if (digits.empty() || digits.size() > 19 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    return std::stoul(digits);
}

bool network_driver(const std::string& driver) {
    return !driver.empty() && driver.find("vfio") == std::string::npos && driver != "pci-stub" &&
           driver.find("uio") == std::string::npos;
}

std::string describe(const HostFs& fs, const Netns& ns) {
    std::string who = ns.pid.empty() ? "" : process_name(fs, ns.pid);
    if (!ns.names.empty())
        return "network namespace " + printable(join(ns.names, "/")) +
               (who.empty() ? "" : ", held by " + who);
    return "the network namespace of " + who;
}

// The interface of `fn` inside ns, seen through the sysfs a process in it mounted; "" if none.
std::string interface_in(const HostFs& fs, const Netns& ns, const PciAddress& fn) {
    if (ns.pid.empty())
        return "";
    for (const auto& l : fs.links("proc/" + ns.pid + "/root/sys/class/net"))
        if (nearest_function(l.target) == fn)
            return l.name;
    return "";
}

}  // namespace

std::vector<std::string> net_dirs(const HostFs& fs, const std::string& devpath) {
    std::vector<std::string> out;
    if (fs.exists(devpath + "/net"))
        out.push_back(devpath + "/net");
    for (const auto& e : fs.list(devpath))
        if (e.rfind("virtio", 0) == 0 && fs.exists(devpath + "/" + e + "/net"))
            out.push_back(devpath + "/" + e + "/net");
    return out;
}

std::vector<Netns> list_netns(const HostFs& fs) {
    std::map<unsigned long, Netns> by_inode;
    auto host = ns_inode(fs.readlink("proc/1/ns/net").value_or(""));
    std::string named_dir = fs.exists("proc/1/root/run/netns") ? "proc/1/root/run/netns" : "run/netns";
    for (const auto& name : fs.list(named_dir))
        if (auto ino = fs.inode(named_dir + "/" + name); ino && ino != host) {
            by_inode[*ino].inode = *ino;
            by_inode[*ino].names.push_back(name);
        }
    for (const auto& pid : fs.list("proc")) {
        if (pid.find_first_not_of("0123456789") != std::string::npos)
            continue;
        auto ino = ns_inode(fs.readlink("proc/" + pid + "/ns/net").value_or(""));
        if (!ino || ino == host)
            continue;
        Netns& ns = by_inode[*ino];
        ns.inode = *ino;
        if (ns.pid.empty())
            ns.pid = pid;
    }
    std::vector<Netns> out;
    for (auto& [ino, ns] : by_inode)
        out.push_back(std::move(ns));
    return out;
}

void find_netns_use(const HostFs& fs, const Topology& topo, HostUse* use) {
    std::optional<std::vector<Netns>> spaces;  // listed only when some interface is hidden
    for (const auto& [addr, fn] : topo.functions) {
        if ((fn.class_code >> 16) != 0x02 || !network_driver(fn.driver) || fn.devpath.empty())
            continue;
        if (!fs.list(fn.devpath + "/net").empty())
            continue;  // the common case, seen with one listing: no need to look for virtio<N>
        auto dirs = net_dirs(fs, fn.devpath);
        bool visible = false;
        for (const auto& d : dirs)
            visible = visible || !fs.list(d).empty();
        if (visible || (!fs.live() && dirs.empty()))
            continue;
        if (!spaces)
            spaces = list_netns(fs);
        std::string line;
        for (const auto& ns : *spaces)
            if (auto ifname = interface_in(fs, ns, addr); !ifname.empty()) {
                line = "its interface " + printable(ifname) + " is in " + describe(fs, ns);
                break;
            }
        if (line.empty()) {
            // Named ones first: an operator's `ip netns` is likelier than a service's sandbox.
            std::vector<std::string> candidates;
            for (bool named : {true, false})
                for (const auto& ns : *spaces)
                    if (ns.names.empty() != named && candidates.size() < 4)
                        candidates.push_back(describe(fs, ns));
            if (spaces->size() > candidates.size())
                candidates.push_back(std::to_string(spaces->size() - candidates.size()) + " more");
            line = "its interface (" + fn.driver + ") is in another network namespace" +
                   (candidates.empty() ? "" : "; candidates: " + join(candidates, ", "));
        }
        use->network[addr].push_back(std::move(line));
    }
}

}  // namespace vfiod
