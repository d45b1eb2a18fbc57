// vfiod-bench-floor ROOT: the floor a plan's read can reach. It reads exactly the attributes
// vfioctl plan reads (topology_reader.cpp, host_use.cpp) and nothing else, with one openat(2)
// or readlinkat(2) per attribute from a ROOT dir fd, letting the kernel walk the (relative) links
// of the tree, and parses nothing. Prints what it saw, so run.sh can check it read the tree.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int root_fd = -1;
size_t bytes = 0;

std::vector<std::string> list(const std::string& rel) {
    std::vector<std::string> out;
    int fd = ::openat(root_fd, rel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return out;
    DIR* d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        return out;
    }
    while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.')
            out.emplace_back(e->d_name);
    ::closedir(d);
    return out;
}

bool read(const std::string& rel) {
    int fd = ::openat(root_fd, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0)
        bytes += static_cast<size_t>(n);
    ::close(fd);
    return true;
}

bool link(const std::string& rel) {
    char buf[4096];
    ssize_t n = ::readlinkat(root_fd, rel.c_str(), buf, sizeof buf);
    if (n > 0)
        bytes += static_cast<size_t>(n);
    return n > 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: vfiod-bench-floor ROOT\n");
        return 2;
    }
    root_fd = ::open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        std::perror(argv[1]);
        return 1;
    }
    size_t functions = 0, members = 0, blocks = 0, nets = 0;
    list("sys/bus/pci/drivers");
    for (const auto& name : list("sys/bus/pci/devices")) {
        const std::string d = "sys/bus/pci/devices/" + name + "/";
        link("sys/bus/pci/devices/" + name);
        for (const char* a : {"vendor", "device", "class", "subsystem_vendor", "subsystem_device",
                              "driver_override", "numa_node", "boot_vga", "sriov_numvfs"})
            read(d + a);
        for (const char* l : {"driver", "iommu_group", "physfn"})
            link(d + l);
        ++functions;
    }
    for (const auto& g : list("sys/kernel/iommu_groups"))
        members += list("sys/kernel/iommu_groups/" + g + "/devices").size();
    list("sys/class/iommu");
    for (const char* f : {"proc/self/mountinfo", "proc/mounts", "proc/swaps", "proc/net/route",
                          "proc/net/ipv6_route"})
        read(f);
    for (const auto& b : list("sys/class/block")) {
        link("sys/class/block/" + b);
        read("sys/class/block/" + b + "/dev");
        list("sys/class/block/" + b + "/holders");
        ++blocks;
    }
    for (const auto& n : list("sys/class/net")) {
        link("sys/class/net/" + n);
        link("sys/class/net/" + n + "/master");
        list("sys/class/net/" + n);  // upper_* entries
        ++nets;
    }
    std::printf("functions=%zu members=%zu blocks=%zu nets=%zu bytes=%zu\n", functions, members,
                blocks, nets, bytes);
    return 0;
}
