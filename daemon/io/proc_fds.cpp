#include "io/proc_fds.hpp"

#include "core/strings.hpp"

namespace vfiod {

namespace {

bool all_digits(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::vector<OpenNode> scan_open_nodes(const HostFs& fs) {
    std::vector<OpenNode> out;
    for (const auto& pid : fs.list("proc")) {
        if (!all_digits(pid))
            continue;
        // Sockets, pipes and anon inodes ("socket:[…]") and regular files are not nodes.
        for (auto& l : fs.links("proc/" + pid + "/fd", "/dev/"))
            if (l.target.rfind("/dev/", 0) == 0)
                out.push_back({pid, std::move(l.target), l.char_device});
    }
    return out;
}

std::string process_name(const HostFs& fs, const std::string& pid) {
    return "pid " + pid + " (" + printable(fs.read("proc/" + pid + "/comm").value_or("?"), 32) + ")";
}

}  // namespace vfiod
