// The per-claim checkpoints (DESIGN §10): what Prepare decided and every file it writes, one
// JSON file per claim in <state-dir>/claims, each replaced whole by rename. "preparing" is
// written before the first file, "prepared" after the last: a crash in between leaves the
// intent, so a retried Prepare finishes it (with the same CDI IDs: they are made from the UID
// and the device) and Unprepare knows what to remove. A checkpoint that is damaged, or lists a
// file this plugin does not write, is never trusted nor deleted: it is moved aside to
// <state-dir>/damaged for a person to look at.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "claims.hpp"
#include "state_files.hpp"

namespace vfiod::dra {

struct Checkpoint {
    struct Device {
        PreparedDevice answer;
        unsigned group = 0;
        std::string address;
    };
    bool prepared = false;
    ClaimRef claim;
    std::vector<Device> devices;
    std::vector<std::string> files;  // host paths

    // The devices as Prepare answers them.
    std::vector<PreparedDevice> answer() const;
};

// The host path of a claim's checkpoint.
std::string checkpoint_path(const std::string& state_dir, const std::string& claim_uid);

class CheckpointStore {
public:
    // Which files a checkpoint may list: the claim's CDI spec and its metadata files.
    struct Options {
        std::string driver, cdi_dir, state_dir;  // host paths
    };
    CheckpointStore(Options o, const StateFiles& files) : o_(std::move(o)), files_(files) {}

    // Makes the state directories (0700), removes what crashed writes left, and hands each
    // sound checkpoint to `take` in the directory's order; the damaged ones are logged and
    // moved aside. False and *err when the directories cannot be used.
    bool load(const std::function<void(Checkpoint&& cp)>& take, std::string* err) const;
    // "" or why, naming the file.
    std::string write(const Checkpoint& cp) const;
    // Every file the checkpoint lists removed (and the claim's metadata directories), then the
    // checkpoint itself. "" or the first failure: then the checkpoint stays.
    std::string remove(const Checkpoint& cp) const;
    // Where the checkpoints are, as this process reaches them: for messages.
    std::string dir() const;

private:
    bool parse(const std::string& text, const std::string& uid, Checkpoint* out,
               std::string* err) const;
    bool lists_ours(const Checkpoint& cp, std::string* err) const;
    // The checkpoint `name` in the directory, or why it cannot be trusted.
    std::string read(int dir, const std::string& name, Checkpoint* out) const;
    void set_aside(int dir, const std::string& name, const std::string& why) const;

    Options o_;
    const StateFiles& files_;
};

}  // namespace vfiod::dra
