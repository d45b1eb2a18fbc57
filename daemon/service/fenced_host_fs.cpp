#include "service/fenced_host_fs.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/strings.hpp"

namespace vfiod {

// Abstract would mean a HostFs method the fence does not implement (see the header).
static_assert(!std::is_abstract_v<FencedHostFs>);

namespace {

// A record of LastRead: kind (tail of the function's directory or whole path), key, value.
constexpr char kTail = 'T', kWhole = 'W';

template <typename N>
N load(const std::string& s, size_t at) {
    N n;
    std::memcpy(&n, s.data() + at, sizeof n);
    return n;
}

template <typename N>
void store(std::string* s, N n) {
    s->append(reinterpret_cast<const char*>(&n), sizeof n);
}

}  // namespace

std::pair<size_t, size_t> LastRead::locate(const Said& said, std::string_view rel) {
    bool tail = rel.size() > said.dir.size() && rel.starts_with(said.dir);
    char kind = tail ? kTail : kWhole;
    std::string_view key = tail ? rel.substr(said.dir.size()) : rel;
    const std::string& r = said.records;
    for (size_t at = 0; at < r.size();) {
        auto key_len = load<uint16_t>(r, at + 1);
        size_t value_at = at + 1 + sizeof(uint16_t) + key_len;
        size_t next = value_at + sizeof(uint32_t) + load<uint32_t>(r, value_at);
        if (r[at] == kind && std::string_view(r).substr(at + 1 + sizeof(uint16_t), key_len) == key)
            return {at, next - at};
        at = next;
    }
    return {std::string::npos, 0};
}

std::optional<std::string> LastRead::find(const PciAddress& fn, std::string_view rel) const {
    auto it = said_.find(fn);
    if (it == said_.end())
        return std::nullopt;
    auto [at, len] = locate(it->second, rel);
    if (at == std::string::npos)
        return std::nullopt;
    const std::string& r = it->second.records;
    size_t value_at = at + 1 + sizeof(uint16_t) + load<uint16_t>(r, at + 1) + sizeof(uint32_t);
    return r.substr(value_at, at + len - value_at);
}

void LastRead::put(const PciAddress& fn, std::string_view rel, size_t owner_end,
                   std::string_view value) {
    Said& said = said_[fn];
    if (said.records.empty())
        said.dir = rel.substr(0, owner_end);
    auto [at, len] = locate(said, rel);
    if (at != std::string::npos)
        said.records.erase(at, len);
    bool tail = rel.size() > said.dir.size() && rel.starts_with(said.dir);
    std::string_view key = tail ? rel.substr(said.dir.size()) : rel;
    // A path longer than a u16 or a value longer than a u32 is no sysfs attribute of ours: such
    // a read is not remembered, as if it had failed.
    if (key.size() > UINT16_MAX || value.size() > UINT32_MAX) {
        if (said.records.empty())
            said_.erase(fn);
        return;
    }
    said.records.push_back(tail ? kTail : kWhole);
    store(&said.records, static_cast<uint16_t>(key.size()));
    said.records.append(key);
    store(&said.records, static_cast<uint32_t>(value.size()));
    said.records.append(value);
    // Grown by doubling while a function is first read; kept for years after.
    if (said.records.capacity() > said.records.size() + 32)
        said.records.shrink_to_fit();
}

void LastRead::erase(const PciAddress& fn, std::string_view rel) {
    auto it = said_.find(fn);
    if (it == said_.end())
        return;
    auto [at, len] = locate(it->second, rel);
    if (at != std::string::npos)
        it->second.records.erase(at, len);
    if (it->second.records.empty())
        said_.erase(it);
}

FencedHostFs::FencedHostFs(HostFs& host) : host_(host) {}

const std::string& FencedHostFs::root() const { return host_.root(); }

std::optional<PciAddress> FencedHostFs::owner(std::string_view rel, size_t* end) {
    std::optional<PciAddress> out;
    for (auto part : path_components(rel))
        if (auto a = PciAddress::parse(part)) {
            out = a;
            if (end)
                *end = static_cast<size_t>(part.data() + part.size() - rel.data());
        }
    return out;
}

std::optional<std::string> FencedHostFs::read(std::string_view rel, size_t max_bytes,
                                             std::string* why, const Dir* in) const {
    size_t end = 0;
    auto fn = owner(rel, &end);
    if (!fn)
        return host_.read(rel, max_bytes, why, in);
    if (fenced_.count(*fn))
        return last_.find(*fn, rel);
    auto v = host_.read(rel, max_bytes, why, in);
    if (v)
        last_.put(*fn, rel, end, *v);
    else
        last_.erase(*fn, rel);
    return v;
}

HostFs::WholeFile FencedHostFs::read_whole(std::string_view rel, size_t max_bytes) const {
    auto fn = owner(rel);
    if (fn && fenced_.count(*fn)) {
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
