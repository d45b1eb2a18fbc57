#include "mdev.hpp"

#include <uuid/uuid.h>

#include "config.hpp"

namespace vfiod {

namespace mdev_paths {

std::string create_file(std::string_view parent, std::string_view type) {
    std::string out(kParents);
    out.append("/").append(parent).append("/").append(kTypes).append("/").append(type);
    return out + "/create";
}

std::string remove_file(std::string_view uuid) {
    return std::string(kDevices) + "/" + std::string(uuid) + "/remove";
}

}  // namespace mdev_paths

std::string mdev_uuid(std::string_view parent, std::string_view type, unsigned index) {
    uuid_t ns;
    const std::string ns_text(kMdevUuidNamespace);
    uuid_parse(ns_text.c_str(), ns);
    std::string text;
    text.reserve(parent.size() + type.size() + 12);
    text.append(parent).append("/").append(type).append("/").append(std::to_string(index));
    uuid_t out;
    uuid_generate_sha1(out, ns, text.data(), text.size());
    char buf[37];
    uuid_unparse_lower(out, buf);
    return buf;
}

bool is_canonical_uuid(std::string_view s) {
    if (s.size() != 36)
        return false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return false;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return false;
        }
    }
    return true;
}

std::optional<unsigned> OwnMdevUuids::index_of(const std::string& parent, const std::string& type,
                                               const std::string& uuid) {
    auto [it, fresh] = pairs_.try_emplace({parent, type});
    if (fresh) {
        it->second.reserve(kMaxMdevCount);
        for (unsigned i = 0; i < kMaxMdevCount; ++i)
            it->second.emplace(mdev_uuid(parent, type, i), i);
    }
    auto found = it->second.find(uuid);
    if (found == it->second.end())
        return std::nullopt;
    return found->second;
}

}  // namespace vfiod
