#include "fleet_tree.hpp"

#include <algorithm>
#include <cstdio>

namespace vfiod::bench {

namespace {

std::string bdf(unsigned bus, unsigned dev, unsigned fn) {
    char s[48];
    std::snprintf(s, sizeof s, "0000:%02x:%02x.%x", bus, dev, fn);
    return s;
}

}  // namespace

std::vector<std::string> vf_addresses(const std::string& pf, unsigned count) {
    std::vector<std::string> out;
    unsigned bus = static_cast<unsigned>(std::stoul(pf.substr(5, 2), nullptr, 16));
    for (unsigned k = 1; k <= count; ++k)
        out.push_back(bdf(bus, k / 8, k % 8));
    return out;
}

void add_vfs(test::FakeTree& t, const std::string& pf, unsigned count, unsigned first_group,
             bool bound) {
    unsigned g = first_group;
    for (const auto& vf : vf_addresses(pf, count)) {
        auto fn = test::FakeTree::pci(vf, "8086", "154c", "020000", bound ? "vfio-pci" : "iavf",
                                      g++);
        if (bound)
            fn.driver_override = "vfio-pci";
        fn.physfn = pf;
        t.add_function(fn);
    }
    t.write_file(t.devpath(pf) + "/sriov_numvfs", std::to_string(count) + "\n");
}

FleetTree build_fleet_tree(test::FakeTree& t, unsigned functions, bool vfs_bound) {
    FleetTree f;
    functions = std::max(functions, 32u);
    const unsigned gpus = functions >= 256 ? 8 : 2;
    const unsigned nvmes = gpus;
    t.enable_iommu();
    t.add_driver("vfio-pci");
    unsigned group = 0, bus = 1, port_index = 0;
    std::string route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n";
    std::string mounts;

    // One root port per card, each its own group; the card sits on the bus below it.
    auto root_port = [&]() {
        std::string port = bdf(0, 1 + port_index / 8, port_index % 8);
        ++port_index;
        t.add_function(test::FakeTree::pci(port, "8086", "a33c", "060400", "pcieport", group++));
        ++f.root_ports;
        return port;
    };
    auto add_pf = [&](unsigned vfs) {
        std::string port = root_port();
        std::string pf = bdf(bus++, 0, 0);
        auto fn = test::FakeTree::pci(pf, "8086", "1572", "020000", "i40e", group++, port);
        fn.sriov_totalvfs = 255;
        t.add_function(fn);
        std::string ifname = "ens" + std::to_string(bus - 1) + "f0";
        t.add_netdev(pf, ifname);
        if (f.pfs.empty())  // the uplink carries the default route
            route += ifname + "\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\n";
        f.pfs.push_back(pf);
        add_vfs(t, pf, vfs, group, vfs_bound);
        group += vfs;
        f.functions += 1 + vfs;
        f.vfs += vfs;
        return pf;
    };

    for (unsigned i = 0; i < gpus; ++i) {
        std::string port = root_port();
        unsigned b = bus++;
        t.add_function(test::FakeTree::pci(bdf(b, 0, 0), "10de", "2331", "030200", "nvidia",
                                           group, port));
        t.add_function(test::FakeTree::pci(bdf(b, 0, 1), "10de", "22a3", "040300",
                                           "snd_hda_intel", group, port));
        ++group;
        f.functions += 2;
        ++f.gpus;
    }
    for (unsigned i = 0; i < nvmes; ++i) {
        std::string port = root_port();
        std::string a = bdf(bus++, 0, 0);
        t.add_function(test::FakeTree::pci(a, "144d", "a808", "010802", "nvme", group++, port));
        std::string disk = "nvme" + std::to_string(i) + "n1";
        t.add_block(a, "nvme/nvme" + std::to_string(i), disk, 259, i);
        if (i % 2 == 0)
            mounts += "1 1 259:" + std::to_string(i) + " / /srv/" + disk + " rw - ext4 /dev/" +
                      disk + " rw\n";
        ++f.functions;
    }
    // The rest: PFs with up to 255 VFs each, and the spare PF last.
    unsigned rest = functions - f.functions - 1;
    while (rest > 0) {
        unsigned vfs = std::min(rest, 256u) - 1;
        add_pf(vfs);
        rest -= vfs + 1;
    }
    f.spare_pf = add_pf(0);
    t.write_file("proc/net/route", route);
    t.write_file("proc/self/mountinfo", mounts);
    t.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    f.config =
        "[daemon]\nmode = \"observe\"\n\n"
        "[[device]]\nselector = \"10de:2331\"\nresource_name = \"nvidia.com/H100\"\n\n"
        "[[device]]\nselector = \"8086:154c\"\nresource_name = \"intel.com/x710_vf\"\n";
    return f;
}

test::FakeTree::Function sriov_fleet_pf(unsigned index, unsigned group) {
    // Root ports on bus 0 (one per PF, device 1.. function 0..7); the PF on bus 1 + 4 * index.
    const std::string port = bdf(0, 1 + index / 8, index % 8);
    auto fn = test::FakeTree::pci(bdf(1 + 4 * index, 0, 0), "8086", "1572", "020000", "i40e",
                                  group, port);
    fn.sriov_totalvfs = 255;
    fn.sriov_vf_device = "154c";
    fn.sriov_offset = 128;  // VF 254's routing ID: PF + 128 + 2 * 254, two buses on
    fn.sriov_stride = 2;
    return fn;
}

SriovFleet build_sriov_fleet(test::FakeTree& t, unsigned pfs) {
    SriovFleet f;
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_driver("iavf");
    for (unsigned i = 0; i <= pfs; ++i) {  // the last port waits for a hot-plugged PF
        auto pf = sriov_fleet_pf(i, 2 * i);
        t.add_function(test::FakeTree::pci(pf.parent, "8086", "a33c", "060400", "pcieport",
                                           2 * i + 1));
        if (i == pfs)
            break;
        t.add_function(pf);
        f.pfs.push_back(pf.address);
    }
    t.write_file("proc/self/mountinfo", "");
    t.write_file("proc/mounts", "");
    t.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    t.write_file("proc/net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n");
    t.write_file("proc/net/ipv6_route", "");
    f.config =
        "[[device]]\nselector = \"8086:154c\"\nresource_name = \"intel.com/x710_vf\"\n\n"
        "[[sriov]]\nselector = \"8086:1572\"\nnum_vfs = 255\n";
    return f;
}

}  // namespace vfiod::bench
