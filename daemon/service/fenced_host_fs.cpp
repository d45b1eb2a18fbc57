#include "service/fenced_host_fs.hpp"

#include <cerrno>

#include "core/strings.hpp"

namespace vfiod {

FencedHostFs::FencedHostFs(HostFs& host) : HostFs(host.root()), host_(host) {}

std::optional<PciAddress> FencedHostFs::owner(std::string_view rel) {
    std::optional<PciAddress> out;
    for (auto part : path_components(rel))
        if (auto a = PciAddress::parse(part))
            out = a;
    return out;
}

std::optional<std::string> FencedHostFs::read(std::string_view rel, size_t max_bytes,
                                             std::string* why, const Dir* in) const {
    auto fn = owner(rel);
    if (!fn)
        return host_.read(rel, max_bytes, why, in);
    if (fenced_.count(*fn)) {
        auto it = last_.find(rel);
        if (it == last_.end())
            return std::nullopt;
        return it->second;
    }
    auto v = host_.read(rel, max_bytes, why, in);
    if (v)
        last_.insert_or_assign(std::string(rel), *v);
    else
        last_.erase(std::string(rel));
    return v;
}

std::optional<std::string> FencedHostFs::readlink(std::string_view rel, const Dir* in) const {
    return host_.readlink(rel, in);
}

std::vector<std::string> FencedHostFs::list(std::string_view rel) const { return host_.list(rel); }

bool FencedHostFs::exists(std::string_view rel, const Dir* in) const {
    return host_.exists(rel, in);
}

std::optional<std::string> FencedHostFs::resolve(std::string_view rel) const {
    return host_.resolve(rel);
}

std::optional<std::pair<unsigned, unsigned>> FencedHostFs::char_device(std::string_view rel) const {
    return host_.char_device(rel);
}

int FencedHostFs::write(std::string_view, std::string_view) { return EROFS; }

}  // namespace vfiod
