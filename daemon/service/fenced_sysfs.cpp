#include "service/fenced_sysfs.hpp"

#include <cerrno>

#include "core/strings.hpp"

namespace vfiod {

FencedSysfs::FencedSysfs(Sysfs& host) : Sysfs(host.root()), host_(host) {}

std::optional<PciAddress> FencedSysfs::owner(std::string_view rel) {
    std::optional<PciAddress> out;
    for (auto part : path_components(rel))
        if (auto a = PciAddress::parse(part))
            out = a;
    return out;
}

std::optional<std::string> FencedSysfs::read(std::string_view rel, size_t max_bytes,
                                             std::string* why) const {
    auto fn = owner(rel);
    if (!fn)
        return host_.read(rel, max_bytes, why);
    if (fenced_.count(*fn)) {
        auto it = last_.find(rel);
        if (it == last_.end())
            return std::nullopt;
        return it->second;
    }
    auto v = host_.read(rel, max_bytes, why);
    if (v)
        last_.insert_or_assign(std::string(rel), *v);
    else
        last_.erase(std::string(rel));
    return v;
}

std::optional<std::string> FencedSysfs::readlink(std::string_view rel) const {
    return host_.readlink(rel);
}

std::vector<std::string> FencedSysfs::list(std::string_view rel) const { return host_.list(rel); }

bool FencedSysfs::exists(std::string_view rel) const { return host_.exists(rel); }

std::optional<std::string> FencedSysfs::resolve(std::string_view rel) const {
    return host_.resolve(rel);
}

std::optional<std::pair<unsigned, unsigned>> FencedSysfs::char_device(std::string_view rel) const {
    return host_.char_device(rel);
}

int FencedSysfs::write(std::string_view, std::string_view) { return EROFS; }

}  // namespace vfiod
