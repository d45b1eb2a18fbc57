#include "checkpoints.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api_objects.hpp"
#include "cdi.hpp"
#include "core/strings.hpp"
#include "json_fields.hpp"
#include "metadata.hpp"

namespace vfiod::dra {

using nlohmann::json;

namespace {

// A checkpoint lists at most kMaxAllocationResults devices and their files: far below this.
constexpr size_t kMaxCheckpointBytes = 1 << 20;
constexpr int kCheckpointVersion = 1;

std::string serialize(const Checkpoint& cp) {
    json devices = json::array();
    for (const auto& d : cp.devices)
        devices.push_back({{"requests", d.answer.requests},
                           {"pool", d.answer.pool},
                           {"device", d.answer.device},
                           {"cdiIDs", d.answer.cdi_ids},
                           {"group", d.group},
                           {"address", d.address}});
    json j = {{"version", kCheckpointVersion},
              {"state", cp.prepared ? "prepared" : "preparing"},
              {"uid", cp.claim.uid},
              {"namespace", cp.claim.namespace_},
              {"name", cp.claim.name},
              {"devices", devices},
              {"files", cp.files}};
    return dump_json(j, 1) + "\n";
}

bool parse_header(const json& j, Checkpoint* cp, std::string* err) {
    const json* v = field(j, "version");
    const json* state = field(j, "state");
    if (!v || !v->is_number_integer() || v->get<int64_t>() != kCheckpointVersion) {
        *err = "unknown version";
        return false;
    }
    if (!state || !state->is_string() || (*state != "prepared" && *state != "preparing")) {
        *err = "state is neither 'prepared' nor 'preparing'";
        return false;
    }
    cp->prepared = *state == "prepared";
    return required_string(j, "uid", "checkpoint", &cp->claim.uid, err) &&
           required_string(j, "namespace", "checkpoint", &cp->claim.namespace_, err) &&
           required_string(j, "name", "checkpoint", &cp->claim.name, err);
}

bool parse_device(const json& d, Checkpoint::Device* dev, std::string* err) {
    const json* g = field(d, "group");
    if (!d.is_object() || !g || !g->is_number_unsigned() || g->get<uint64_t>() > 1u << 30) {
        *err = "a device without its IOMMU group";
        return false;
    }
    if (!required_string(d, "pool", "device", &dev->answer.pool, err) ||
        !required_string(d, "device", "device", &dev->answer.device, err) ||
        !required_string(d, "address", "device", &dev->address, err) ||
        !string_list(d, "requests", kMaxAllocationResults, &dev->answer.requests, err) ||
        !string_list(d, "cdiIDs", 16, &dev->answer.cdi_ids, err))
        return false;
    dev->group = g->get<unsigned>();
    return true;
}

}  // namespace

std::vector<PreparedDevice> Checkpoint::answer() const {
    std::vector<PreparedDevice> out;
    for (const auto& d : devices)
        out.push_back(d.answer);
    return out;
}

std::string checkpoint_path(const std::string& state_dir, const std::string& claim_uid) {
    return state_dir + "/claims/" + claim_uid + ".json";
}

std::string CheckpointStore::dir() const { return files_.path(o_.state_dir + "/claims"); }

bool CheckpointStore::parse(const std::string& text, const std::string& uid, Checkpoint* out,
                            std::string* err) const {
    if (too_deep(text, 8)) {
        *err = "nested too deeply";
        return false;
    }
    json j = parse_json(text);
    if (j.is_discarded() || !j.is_object()) {
        *err = "not a JSON object";
        return false;
    }
    Checkpoint cp;
    if (!parse_header(j, &cp, err))
        return false;
    if (cp.claim.uid != uid) {
        *err = "its UID is not its file's name";
        return false;
    }
    const json* devices = field(j, "devices");
    if (!devices || !devices->is_array() || devices->size() > kMaxAllocationResults) {
        *err = "devices is not a list of at most " + std::to_string(kMaxAllocationResults);
        return false;
    }
    for (const json& d : *devices)
        if (!parse_device(d, &cp.devices.emplace_back(), err))
            return false;
    if (!string_list(j, "files", kMaxAllocationResults + 1, &cp.files, err) ||
        !lists_ours(cp, err))
        return false;
    *out = std::move(cp);
    return true;
}

// Unprepare removes what is listed: never a file that is not one of ours.
bool CheckpointStore::lists_ours(const Checkpoint& cp, std::string* err) const {
    const std::string& uid = cp.claim.uid;
    for (const auto& f : cp.files)
        if (f != cdi_spec_path(o_.cdi_dir, uid) &&
            !is_metadata_path(f, o_.state_dir, uid, o_.driver)) {
            *err = "it lists " + printable(f, 200) + ", not a file this plugin writes";
            return false;
        }
    return true;
}

std::string CheckpointStore::read(int dir, const std::string& n, Checkpoint* out) const {
    std::string uid = n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0
                          ? n.substr(0, n.size() - 5)
                          : std::string();
    std::string why;
    if (!safe_uid(uid))
        return "not a checkpoint's name";
    std::optional<std::string> text = HostFs::read_own(dir, n, kMaxCheckpointBytes + 1, &why);
    if (!text)
        return why.empty() ? "unreadable" : why;
    if (text->size() > kMaxCheckpointBytes)
        return "larger than 1 MiB";
    parse(*text, uid, out, &why);
    return why;
}

// Never trusted, never deleted: set aside for a person to look at.
void CheckpointStore::set_aside(int dir, const std::string& n, const std::string& why) const {
    const std::string full = files_.path(o_.state_dir + "/claims/" + n);
    const std::string aside = o_.state_dir + "/damaged";
    const std::string to = n + "." + std::to_string(std::time(nullptr));
    int e = 0;
    Fd aside_dir = files_.open_private(aside, &e);
    if (aside_dir.get() >= 0 && ::renameat(dir, n.c_str(), aside_dir.get(), to.c_str()) != 0)
        e = errno;
    if (aside_dir.get() >= 0 && !e)
        spdlog::warn("checkpoint {} is damaged ({}): moved to {}", full, printable(why, 200),
                     files_.path(aside + "/" + to));
    else
        spdlog::warn("checkpoint {} is damaged ({}) and could not be moved aside: {}", full,
                     printable(why, 200), StateFiles::errno_text(e));
}

bool CheckpointStore::load(const std::function<void(Checkpoint&& cp)>& take,
                           std::string* err) const {
    Fd dir;
    for (const std::string& d : {o_.state_dir + "/metadata", o_.state_dir + "/claims"}) {
        int e = 0;
        dir = files_.open_private(d, &e);
        if (dir.get() < 0) {
            *err = "cannot create the state directory " + files_.path(d) + ": " +
                   StateFiles::errno_text(e);
            return false;
        }
    }
    for (const auto& n : HostFs::list_own(dir.get())) {
        if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) {
            // A write a crash cut short; what it replaced is still there.
            ::unlinkat(dir.get(), n.c_str(), 0);
            continue;
        }
        Checkpoint cp;
        if (std::string why = read(dir.get(), n, &cp); !why.empty())
            set_aside(dir.get(), n, why);
        else
            take(std::move(cp));
    }
    return true;
}

std::string CheckpointStore::write(const Checkpoint& cp) const {
    return files_.write(checkpoint_path(o_.state_dir, cp.claim.uid), serialize(cp), 0600, true);
}

std::string CheckpointStore::remove(const Checkpoint& cp) const {
    std::string first;
    std::set<std::string> dirs;
    for (const auto& f : cp.files) {
        std::string e = files_.remove(f);
        if (first.empty())
            first = e;
        if (f.rfind(o_.state_dir + "/metadata/", 0) == 0)
            dirs.insert(dir_of(f));
    }
    // The per-request directories and the claim's own one are ours, made by Prepare.
    dirs.insert(o_.state_dir + "/metadata/" + cp.claim.uid);
    for (auto d = dirs.rbegin(); d != dirs.rend(); ++d)  // "<uid>/<request>" before "<uid>"
        if (std::string e = files_.remove_dir(*d); first.empty())
            first = e;
    if (!first.empty())
        return first;
    return files_.remove(checkpoint_path(o_.state_dir, cp.claim.uid), true);
}

}  // namespace vfiod::dra
