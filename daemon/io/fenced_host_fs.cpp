#include "io/fenced_host_fs.hpp"

#include <algorithm>
#include <cerrno>
#include <type_traits>

#include "core/mdev.hpp"
#include "io/host_use.hpp"

namespace vfiod {

// Abstract would mean a HostFs method the fence does not implement (see the header).
static_assert(!std::is_abstract_v<FencedHostFs>);

FencedHostFs::FencedHostFs(HostFs& host) : host_(host) {}

const std::string& FencedHostFs::root() const { return host_.root(); }

bool FencedHostFs::refused_mdev(std::string_view rel) const {
    const bool types = rel.find(std::string("/") + mdev_paths::kTypes) != std::string_view::npos;
    for (size_t at = 0; at <= rel.size();) {
        size_t end = std::min(rel.find('/', at), rel.size());
        std::string_view part = rel.substr(at, end - at);
        if ((types || is_canonical_uuid(part)) && fenced_names_.count(part))
            return true;
        at = end + 1;
    }
    return false;
}

bool FencedHostFs::refused(std::string_view rel) const {
    if (!fenced_names_.empty() && refused_mdev(rel))
        return true;
    if (fenced_.empty())  // nearly always: no path to take apart
        return false;
    auto fn = nearest_function(rel);
    return fn && fenced_.count(*fn);
}

std::optional<std::string> FencedHostFs::read(std::string_view rel, size_t max_bytes,
                                             std::string* why, const Dir* in) const {
    if (refused(rel))
        return std::nullopt;
    return host_.read(rel, max_bytes, why, in);
}

HostFs::WholeFile FencedHostFs::read_whole(std::string_view rel, size_t max_bytes) const {
    if (refused(rel)) {
        WholeFile busy;
        busy.err = EBUSY;
        return busy;
    }
    return host_.read_whole(rel, max_bytes);
}

HostFs::Dir FencedHostFs::open_dir(std::string_view rel) const { return host_.open_dir(rel); }

std::optional<std::string> FencedHostFs::readlink(std::string_view rel, const Dir* in) const {
    return host_.readlink(rel, in);
}

std::vector<std::string> FencedHostFs::list(std::string_view rel, int* err) const {
    return host_.list(rel, err);
}

bool FencedHostFs::exists(std::string_view rel, const Dir* in) const {
    return host_.exists(rel, in);
}

std::optional<std::string> FencedHostFs::resolve(std::string_view rel) const {
    return host_.resolve(rel);
}

std::optional<std::pair<unsigned, unsigned>> FencedHostFs::char_device(std::string_view rel) const {
    return host_.char_device(rel);
}

bool FencedHostFs::leads_somewhere(std::string_view rel) const {
    return host_.leads_somewhere(rel);
}

std::optional<unsigned long> FencedHostFs::inode(std::string_view rel) const {
    return host_.inode(rel);
}

int FencedHostFs::probe_exclusive(std::string_view rel) const {
    return host_.probe_exclusive(rel);
}

std::vector<HostFs::Link> FencedHostFs::links(std::string_view rel,
                                              std::string_view stat_prefix) const {
    return host_.links(rel, stat_prefix);
}

Fd FencedHostFs::open_own_dir(std::string_view rel, bool create, int* err) const {
    return host_.open_own_dir(rel, create, err);
}

int FencedHostFs::write(std::string_view, std::string_view) { return EROFS; }

}  // namespace vfiod
