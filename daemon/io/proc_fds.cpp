#include "io/proc_fds.hpp"

#include "core/strings.hpp"

namespace vfiod {

namespace {

bool all_digits(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::vector<OpenNode> scan_open_nodes(const Sysfs& fs) {
    std::vector<OpenNode> out;
    for (const auto& pid : fs.list("proc")) {
        if (!all_digits(pid))
            continue;
        const std::string fd_dir = "proc/" + pid + "/fd";
        for (const auto& fd : fs.list(fd_dir)) {
            const std::string link = fd_dir + "/" + fd;
            auto target = fs.readlink(link);
            // Sockets, pipes and anon inodes ("socket:[…]") and regular files are not nodes.
            if (!target || target->rfind("/dev/", 0) != 0)
                continue;
            out.push_back({pid, std::move(*target), fs.char_device(link)});
        }
    }
    return out;
}

std::string process_name(const Sysfs& fs, const std::string& pid) {
    return "pid " + pid + " (" + printable(fs.read("proc/" + pid + "/comm").value_or("?"), 32) + ")";
}

}  // namespace vfiod
