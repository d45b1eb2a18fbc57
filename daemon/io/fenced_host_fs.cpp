#include "io/fenced_host_fs.hpp"

#include <algorithm>
#include <cerrno>
#include <type_traits>

#include "core/strings.hpp"

namespace vfiod {

// Abstract would mean a HostFs method the fence does not implement (see the header).
static_assert(!std::is_abstract_v<FencedHostFs>);

std::string LastRead::key_of(const PciAddress& fn, const Said& said,
                             std::string_view rel) const {
    if (said.parent != kNone) {
        std::string_view parent = texts_[said.parent].text;
        std::string address = fn.str();
        if (rel.size() > parent.size() + address.size() && rel.starts_with(parent) &&
            rel.substr(parent.size()).starts_with(address))
            return "T" + std::string(rel.substr(parent.size() + address.size()));
    }
    return "W" + std::string(rel);
}

std::optional<uint32_t> LastRead::lookup(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
}

uint32_t LastRead::intern(std::string_view text) {
    if (auto id = lookup(text)) {
        ++texts_[*id].refs;
        return *id;
    }
    uint32_t id = static_cast<uint32_t>(texts_.size());
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        texts_.emplace_back();
    }
    texts_[id] = Text{std::string(text), 1};
    index_.emplace(texts_[id].text, id);
    return id;
}

void LastRead::release(uint32_t id) {
    if (--texts_[id].refs > 0)
        return;
    index_.erase(texts_[id].text);
    texts_[id].text = std::string();
    free_.push_back(id);
}

std::vector<std::pair<uint32_t, uint32_t>>::iterator LastRead::record(const PciAddress& fn,
                                                                     Said& said,
                                                                     std::string_view rel) {
    auto key = lookup(key_of(fn, said, rel));
    return std::find_if(said.records.begin(), said.records.end(),
                        [&](const auto& r) { return key && r.first == *key; });
}

std::optional<std::string> LastRead::find(const PciAddress& fn, std::string_view rel) const {
    auto it = said_.find(fn);
    if (it == said_.end())
        return std::nullopt;
    auto key = lookup(key_of(fn, it->second, rel));
    for (const auto& [k, v] : it->second.records)
        if (key && k == *key)
            return texts_[v].text;
    return std::nullopt;
}

void LastRead::put(const PciAddress& fn, std::string_view rel, size_t owner_end,
                   std::string_view value) {
    Said& said = said_[fn];
    if (said.records.empty()) {  // new: a function's entry goes with its last record
        std::string address = fn.str();
        if (owner_end >= address.size() &&
            rel.substr(owner_end - address.size(), address.size()) == address)
            said.parent = intern(rel.substr(0, owner_end - address.size()));
    }
    uint32_t v = intern(value);
    auto r = record(fn, said, rel);
    if (r != said.records.end()) {
        release(std::exchange(r->second, v));
        return;
    }
    // Grown one at a time, not by doubling: a function's records are kept for years.
    said.records.reserve(said.records.size() + 1);
    said.records.emplace_back(intern(key_of(fn, said, rel)), v);
}

void LastRead::erase(const PciAddress& fn, std::string_view rel) {
    auto it = said_.find(fn);
    if (it == said_.end())
        return;
    auto r = record(fn, it->second, rel);
    if (r != it->second.records.end()) {
        release(r->first);
        release(r->second);
        it->second.records.erase(r);
    }
    if (it->second.records.empty()) {
        if (it->second.parent != kNone)
            release(it->second.parent);
        said_.erase(it);
    }
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
