#include "mdev.hpp"

#include <uuid/uuid.h>

#include <algorithm>

#include "config.hpp"

namespace vfiod {

namespace mdev_paths {

std::string type_dir(std::string_view parent, std::string_view type) {
    std::string out(kParents);
    out.append("/").append(parent).append("/").append(kTypes).append("/").append(type);
    return out;
}

std::string create_file(std::string_view parent, std::string_view type) {
    return type_dir(parent, type) + "/create";
}

std::string remove_file(std::string_view uuid) {
    return std::string(kDevices) + "/" + std::string(uuid) + "/remove";
}

}  // namespace mdev_paths

namespace {

using UuidBytes = std::array<unsigned char, 16>;

// kMdevUuidNamespace, parsed once: every UUID of every pair is made in it.
const unsigned char* uuid_namespace() {
    static const UuidBytes ns = [] {
        UuidBytes out{};
        uuid_parse(std::string(kMdevUuidNamespace).c_str(), out.data());
        return out;
    }();
    return ns.data();
}

UuidBytes own_uuid(std::string_view parent, std::string_view type, unsigned index) {
    std::string text;
    text.reserve(parent.size() + type.size() + 12);
    text.append(parent).append("/").append(type).append("/").append(std::to_string(index));
    UuidBytes out;
    uuid_generate_sha1(out.data(), uuid_namespace(), text.data(), text.size());
    return out;
}

}  // namespace

std::string mdev_uuid(std::string_view parent, std::string_view type, unsigned index) {
    const UuidBytes u = own_uuid(parent, type, index);
    char buf[37];
    uuid_unparse_lower(u.data(), buf);
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

OwnMdevUuids& OwnMdevUuids::shared() {
    static OwnMdevUuids table;
    return table;
}

std::optional<unsigned> OwnMdevUuids::index_of(const std::string& parent, const std::string& type,
                                               const std::string& uuid) {
    UuidBytes key;
    if (!is_canonical_uuid(uuid) || uuid_parse(uuid.c_str(), key.data()) != 0)
        return std::nullopt;  // the kernel names no mdev so, and vfiod never did
    std::lock_guard lock(mu_);
    auto [it, fresh] = pairs_.try_emplace({parent, type});
    if (fresh) {
        if (pairs_.size() > kMaxPairs) {
            auto oldest = pairs_.end();
            for (auto p = pairs_.begin(); p != pairs_.end(); ++p)
                if (p != it && (oldest == pairs_.end() || p->second.asked < oldest->second.asked))
                    oldest = p;
            pairs_.erase(oldest);
        }
        std::vector<Own>& own = it->second.own;
        own.reserve(kMaxMdevCount);
        for (unsigned i = 0; i < kMaxMdevCount; ++i)
            own.push_back({own_uuid(parent, type, i), static_cast<uint16_t>(i)});
        std::sort(own.begin(), own.end(),
                  [](const Own& a, const Own& b) { return a.uuid < b.uuid; });
        ++made_;
    }
    it->second.asked = ++clock_;
    const std::vector<Own>& own = it->second.own;
    auto found = std::lower_bound(own.begin(), own.end(), key,
                                  [](const Own& o, const UuidBytes& k) { return o.uuid < k; });
    if (found == own.end() || found->uuid != key)
        return std::nullopt;
    return found->index;
}

size_t OwnMdevUuids::pairs_made() const {
    std::lock_guard lock(mu_);
    return made_;
}

size_t OwnMdevUuids::pairs_kept() const {
    std::lock_guard lock(mu_);
    return pairs_.size();
}

}  // namespace vfiod
