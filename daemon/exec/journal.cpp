#include "exec/journal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <set>
#include <sstream>

#include "core/mdev.hpp"
#include "core/strings.hpp"

namespace vfiod {

namespace {

constexpr const char* kMagic = "vfiod-journal 1";

// Driver names are plain words, but driver_override holds whatever an admin wrote; escaping
// keeps one field per token whatever it contains.
std::string escape(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '-' || c == '.' || c == ':';
        if (plain) {
            out += static_cast<char>(c);
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02x", c);
            out += buf;
        }
    }
    return out;
}

std::optional<std::string> unescape(const std::string& s) {
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        return -1;
    };
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        int hi = i + 2 < s.size() ? hex(s[i + 1]) : -1;
        int lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            return std::nullopt;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return out;
}

template <typename E, size_t N>
std::optional<E> from_string(const std::string& s, const std::pair<E, const char*> (&table)[N]) {
    for (const auto& [value, name] : table)
        if (s == name)
            return value;
    return std::nullopt;
}

constexpr std::pair<JournalEntry::Op, const char*> kOps[] = {
    {JournalEntry::Op::Bind, "bind"},
    {JournalEntry::Op::Release, "release"},
};
constexpr std::pair<JournalEntry::Phase, const char*> kPhases[] = {
    {JournalEntry::Phase::Started, "started"},
    {JournalEntry::Phase::Done, "done"},
    {JournalEntry::Phase::RolledBack, "rolled-back"},
    {JournalEntry::Phase::Stuck, "stuck"},
};

bool fail(std::string* err, std::string msg) {
    if (err)
        *err = std::move(msg);
    return false;
}

std::string group_name(unsigned group) { return "group-" + std::to_string(group); }

// The entry names load_all() takes: exactly "group-" and a group number as store() writes it, so
// "group-+13", "group-013" or a number past 32 bits name nothing (and never a second group 13).
std::optional<unsigned> group_of_name(const std::string& name) {
    if (name.rfind("group-", 0) != 0 || name.size() == 6 || name.size() > 16)
        return std::nullopt;
    char* end = nullptr;
    unsigned long g = std::strtoul(name.c_str() + 6, &end, 10);
    if (*end || g > 0xffffffffUL || name != "group-" + std::to_string(g))
        return std::nullopt;
    return static_cast<unsigned>(g);
}

}  // namespace

const char* to_string(JournalEntry::Op op) {
    for (const auto& [value, name] : kOps)
        if (value == op)
            return name;
    return "?";
}

const char* to_string(JournalEntry::Phase phase) {
    for (const auto& [value, name] : kPhases)
        if (value == phase)
            return name;
    return "?";
}

std::map<PciAddress, std::string> JournalEntry::originals() const {
    std::map<PciAddress, std::string> out;
    for (const auto& f : functions)
        out[f.address] = f.original;
    return out;
}

std::string serialize(const JournalEntry& e) {
    std::string out = std::string(kMagic) + "\n";
    out += "group " + std::to_string(e.group) + "\n";
    out += std::string("op ") + to_string(e.op) + "\n";
    out += std::string("phase ") + to_string(e.phase) + "\n";
    out += std::string("released ") + (e.released ? "1" : "0") + "\n";
    for (const auto& f : e.functions)
        out += "function " + f.address.str() + " original=" + escape(f.original) +
               " before=" + escape(f.before) + " before_override=" + escape(f.before_override) +
               " target=" + escape(f.target) + "\n";
    return out;
}

namespace {

// The rest of a `function` line after its address: its key=value fields. An error names why.
std::optional<std::string> parse_function_fields(std::istringstream& fields,
                                                 JournalEntry::Function* f) {
    std::string kv;
    while (fields >> kv) {
        auto eq = kv.find('=');
        auto v = eq == std::string::npos ? std::nullopt : unescape(kv.substr(eq + 1));
        if (!v)
            return "bad field '" + kv + "'";
        std::string k = kv.substr(0, eq);
        if (k == "original")
            f->original = *v;
        else if (k == "before")
            f->before = *v;
        else if (k == "before_override")
            f->before_override = *v;
        else if (k == "target")
            f->target = *v;
        else
            return "unknown field '" + k + "'";
    }
    return std::nullopt;
}

// Which of the required keys an entry has named so far.
struct Required {
    bool group = false, op = false, phase = false;
};

// One line of an entry, applied to `e`; an error names why the line is bad.
std::optional<std::string> parse_journal_line(const std::string& key, const std::string& value,
                                              std::istringstream& fields, JournalEntry& e,
                                              Required& seen) {
    if (key == "group") {
        char* end = nullptr;
        unsigned long g = std::strtoul(value.c_str(), &end, 10);
        if (value.empty() || *end || g > 0xffffffffUL)
            return "bad group '" + value + "'";
        e.group = static_cast<unsigned>(g);
        seen.group = true;
    } else if (key == "op") {
        auto op = from_string(value, kOps);
        if (!op)
            return "unknown op '" + value + "'";
        e.op = *op;
        seen.op = true;
    } else if (key == "phase") {
        auto ph = from_string(value, kPhases);
        if (!ph)
            return "unknown phase '" + value + "'";
        e.phase = *ph;
        seen.phase = true;
    } else if (key == "released") {
        if (value != "0" && value != "1")
            return "bad released '" + value + "'";
        e.released = value == "1";
    } else if (key == "function") {
        if (e.functions.size() == kMaxEntryFunctions)
            return "names more than " + std::to_string(kMaxEntryFunctions) +
                   " functions, more than an IOMMU group holds: not an entry vfiod wrote";
        auto addr = PciAddress::parse(value);
        if (!addr)
            return "bad address '" + value + "'";
        JournalEntry::Function f{*addr, "", "", "", ""};
        if (auto why = parse_function_fields(fields, &f))
            return why;
        e.functions.push_back(std::move(f));
    } else {
        return "unknown key '" + key + "'";
    }
    return std::nullopt;
}

}  // namespace

namespace {

using LineParser = std::function<std::optional<std::string>(
    const std::string& key, const std::string& value, std::istringstream& fields)>;

// Both kinds of entry: the magic line, then "key value [fields]" lines, blank ones skipped. The
// first error `line` returns stops it, named with its line number.
bool parse_lines(const std::string& text, const std::string& magic, const std::string& kind,
                 const LineParser& line, std::string* err) {
    std::istringstream in(text);
    std::string l;
    if (!std::getline(in, l) || l != magic)
        return fail(err, "not a " + kind + " (first line is not '" + magic + "')");
    unsigned lineno = 1;
    while (std::getline(in, l)) {
        ++lineno;
        std::istringstream fields(l);
        std::string key, value;
        fields >> key >> value;
        if (key.empty())
            continue;
        if (auto why = line(key, value, fields))
            return fail(err, "line " + std::to_string(lineno) + ": " + printable(*why, 256));
    }
    return true;
}

}  // namespace

std::optional<JournalEntry> parse_journal(const std::string& text, std::string* err) {
    JournalEntry e;
    Required seen;
    auto line = [&](const std::string& key, const std::string& value, std::istringstream& fields) {
        return parse_journal_line(key, value, fields, e, seen);
    };
    if (!parse_lines(text, kMagic, "vfiod journal", line, err))
        return std::nullopt;
    if (!seen.group || !seen.op || !seen.phase) {
        fail(err, "incomplete entry (group, op and phase are required)");
        return std::nullopt;
    }
    return e;
}

Journal::Journal(const HostFs& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

std::string Journal::entry_path(unsigned group) const { return dir_ + "/" + group_name(group); }

std::string Journal::why(int err) const {
    return fs_.own_dir_error(err) + (err == EXDEV ? "; the journal is not used there" : "");
}

std::string Journal::describe_error(unsigned group, int err) const {
    return "journal " + entry_path(group) + ": " + why(err);
}

Fd Journal::open_dir(bool create, int* err) const { return fs_.open_own_dir(dir_, create, err); }

namespace {

// A directory that is not there (or is a file) holds no entries; anything else is worth saying.
bool no_journal_yet(int err) { return err == ENOENT || err == ENOTDIR; }

}  // namespace

Fd Journal::open_for_load(std::string* err) const {
    int derr = 0;
    Fd dir = open_dir(false, &derr);
    if (dir.get() < 0 && !no_journal_yet(derr))
        fail(err, dir_ + ": " + why(derr));
    return dir;
}

std::optional<std::string> Journal::read_entry(int dirfd, const std::string& name,
                                               size_t max_bytes, std::string* err) const {
    const std::string path = dir_ + "/" + name;
    std::string refused;
    // Two bytes over the bound: read_own() drops one trailing newline, and one more byte tells a
    // file that is too big from one that fits exactly. With only one, a file cut right after a
    // newline read as a shorter one that fits, and was parsed in part.
    auto text = HostFs::read_own(dirfd, name, max_bytes + 2, &refused);
    if (!refused.empty())
        fail(err, path + ": " + refused);
    if (!text)
        return std::nullopt;
    if (text->size() > max_bytes) {
        fail(err, path + ": larger than " + std::to_string(max_bytes) +
                      " bytes: not an entry vfiod wrote");
        return std::nullopt;
    }
    return text;
}

std::optional<JournalEntry> Journal::load(unsigned group, std::string* err) const {
    Fd dir = open_for_load(err);
    if (dir.get() < 0)
        return std::nullopt;
    return load_at(dir.get(), group, err);
}

template <typename Entry>
std::optional<Entry> Journal::parse_at(int dirfd, const std::string& name, size_t max_bytes,
                                       std::optional<Entry> (*parse)(const std::string&,
                                                                     std::string*),
                                       std::string* err) const {
    auto text = read_entry(dirfd, name, max_bytes, err);
    if (!text)
        return std::nullopt;
    std::string reason;
    auto e = parse(*text + "\n", &reason);
    if (!e)
        fail(err, dir_ + "/" + name + ": " + reason);
    return e;
}

void Journal::each_name(std::vector<std::string>* errors, const NameVisitor& visit) const {
    std::string derr;
    Fd dir = open_for_load(&derr);
    if (dir.get() < 0) {
        if (errors && !derr.empty())
            errors->push_back(derr);
        return;
    }
    for (const auto& name : HostFs::list_own(dir.get())) {
        std::string err;
        visit(dir.get(), name, &err);
        if (errors && !err.empty())
            errors->push_back(err);
    }
}

std::optional<JournalEntry> Journal::load_at(int dirfd, unsigned group, std::string* err) const {
    auto e = parse_at(dirfd, group_name(group), kMaxEntryBytes, parse_journal, err);
    if (!e)
        return std::nullopt;
    if (e->group != group) {
        fail(err, entry_path(group) + ": names group " + std::to_string(e->group));
        return std::nullopt;
    }
    return e;
}

std::vector<JournalEntry> Journal::load_all(std::vector<std::string>* errors) const {
    std::vector<JournalEntry> out;
    each_name(errors, [&](int dirfd, const std::string& name, std::string* err) {
        // Leftover temp files of an interrupted store() are not entries: the rename never
        // happened, so the previous entry (if any) is still the truth. PF entries are not
        // groups' either.
        if (auto g = group_of_name(name))
            if (auto e = load_at(dirfd, *g, err))
                out.push_back(std::move(*e));
    });
    return out;
}

int Journal::store(const JournalEntry& entry) {
    int err = store_text(group_name(entry.group), serialize(entry));
    if (!err)
        note_released(entry.group, entry.released);
    return err;
}

int Journal::remove(unsigned group) {
    int err = remove_name(group_name(group));
    if (!err)
        note_released(group, false);
    return err;
}

void Journal::note_released(unsigned group, bool released) {
    std::lock_guard lock(released_mu_);
    if (!released_)
        return;  // not read yet: the first question reads the entry as it now is
    if (released)
        released_->insert(group);
    else
        released_->erase(group);
}

int Journal::store_text(const std::string& name, const std::string& text) {
    int err = 0;
    Fd dir = open_dir(true, &err);
    // A FIFO left at the temp name cannot block the write (replace_own creates it O_EXCL): it
    // would hold the group's queue and, at SIGTERM, the daemon's exit.
    return dir.get() < 0 ? err : HostFs::replace_own(dir.get(), name, text, 0644);
}

int Journal::remove_name(const std::string& name) {
    int err = 0;
    Fd dir = open_dir(false, &err);
    if (dir.get() < 0)
        return no_journal_yet(err) ? 0 : err;
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return errno;
    return 0;
}

std::map<PciAddress, std::string> Journal::originals(unsigned group) const {
    auto entry = load(group);
    return entry ? entry->originals() : std::map<PciAddress, std::string>{};
}

bool Journal::released(unsigned group) const {
    std::lock_guard lock(released_mu_);
    if (!released_) {
        // Unreadable entries are named where they are acted on (reconcile); here they are as
        // good as none, as a load() that failed always was.
        released_.emplace();
        for (const auto& e : load_all())
            if (e.released)
                released_->insert(e.group);
    }
    return released_->count(group) > 0;
}

int Journal::clear_released(unsigned group) {
    if (!released(group))
        return 0;
    auto e = load(group);
    if (!e || !e->released) {
        note_released(group, false);  // the entry went or changed under us: nothing to clear
        return 0;
    }
    e->released = false;
    return store(*e);
}

}  // namespace vfiod

// PF entries (DESIGN §11).

namespace vfiod {

namespace {

constexpr const char* kPfMagic = "vfiod-pf-journal 1";
constexpr const char* kPfPrefix = "pf-";

constexpr std::pair<PfJournalEntry::Phase, const char*> kPfPhases[] = {
    {PfJournalEntry::Phase::Started, "started"},
    {PfJournalEntry::Phase::Stuck, "stuck"},
};

std::string pf_name(const PciAddress& pf) { return kPfPrefix + pf.str(); }

// The names load_all_pfs() takes: "pf-" and an address exactly as str() spells it; anything
// else there (temp files, another spelling of an address) names no PF.
std::optional<PciAddress> pf_of_name(const std::string& name) {
    if (name.rfind(kPfPrefix, 0) != 0)
        return std::nullopt;
    auto a = PciAddress::parse(std::string_view(name).substr(3));
    if (!a || pf_name(*a) != name)
        return std::nullopt;
    return a;
}

// A VF count as the kernel's kstrtou16 would take it and serialize() writes it: plain decimal.
std::optional<unsigned> count_of(const std::string& s) {
    if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0') ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    unsigned long v = std::strtoul(s.c_str(), nullptr, 10);
    if (v > 0xffff)
        return std::nullopt;
    return static_cast<unsigned>(v);
}

// Why a line of a strict entry (PF, mdev) is bad before its value is looked at: a second value,
// or a key given before; nullopt when neither.
std::optional<std::string> single(std::set<std::string>& seen, const std::string& key,
                                  std::istringstream& fields) {
    std::string extra;
    if (fields >> extra)
        return "more than one value for '" + key + "'";
    if (!seen.insert(key).second)
        return "'" + key + "' given twice";
    return std::nullopt;
}

// A strict entry (PF, mdev): the magic line, then `keys` lines, each key once with one value,
// each applied to the entry by `apply`; `keys` names them for an entry that lacks one.
template <typename Entry>
std::optional<Entry> parse_strict(
    const std::string& text, const char* magic, const char* kind,
    std::initializer_list<const char*> keys,
    std::optional<std::string> (*apply)(const std::string&, const std::string&, Entry&),
    std::string* err) {
    Entry e;
    std::set<std::string> seen;
    auto line = [&](const std::string& key, const std::string& value,
                    std::istringstream& fields) -> std::optional<std::string> {
        if (auto why = single(seen, key, fields))
            return why;
        return apply(key, value, e);
    };
    if (!parse_lines(text, magic, kind, line, err))
        return std::nullopt;
    if (seen.size() != keys.size()) {
        std::string names;
        for (size_t i = 0; i < keys.size(); ++i)
            names += std::string(i == 0 ? "" : i + 1 < keys.size() ? ", " : " and ") +
                     keys.begin()[i];
        fail(err, "incomplete entry (" + names + " are required)");
        return std::nullopt;
    }
    return e;
}

// One line of a PF entry, applied to `e`; an error names why the line is bad.
std::optional<std::string> parse_pf_line(const std::string& key, const std::string& value,
                                         PfJournalEntry& e) {
    if (key == "pf") {
        auto a = PciAddress::parse(value);
        if (!a || a->str() != value)
            return "bad address '" + value + "'";
        e.pf = *a;
    } else if (key == "from" || key == "to") {
        auto n = count_of(value);
        if (!n)
            return "bad count '" + value + "'";
        (key == "from" ? e.from : e.to) = *n;
    } else if (key == "phase") {
        auto ph = from_string(value, kPfPhases);
        if (!ph)
            return "unknown phase '" + value + "'";
        e.phase = *ph;
    } else {
        return "unknown key '" + key + "'";
    }
    return std::nullopt;
}

}  // namespace

const char* to_string(PfJournalEntry::Phase phase) {
    for (const auto& [value, name] : kPfPhases)
        if (value == phase)
            return name;
    return "?";
}

std::string serialize(const PfJournalEntry& e) {
    return std::string(kPfMagic) + "\n" + "pf " + e.pf.str() + "\n" + "from " +
           std::to_string(e.from) + "\n" + "to " + std::to_string(e.to) + "\n" + "phase " +
           to_string(e.phase) + "\n";
}

// Stricter than a group entry's parser can afford to be: four keys, each once, one value each.
std::optional<PfJournalEntry> parse_pf_journal(const std::string& text, std::string* err) {
    return parse_strict(text, kPfMagic, "vfiod PF journal", {"pf", "from", "to", "phase"},
                        parse_pf_line, err);
}

std::string Journal::pf_entry_path(const PciAddress& pf) const { return dir_ + "/" + pf_name(pf); }

std::string Journal::describe_pf_error(const PciAddress& pf, int err) const {
    return "journal " + pf_entry_path(pf) + ": " + why(err);
}

std::optional<PfJournalEntry> Journal::load_pf(const PciAddress& pf, std::string* err) const {
    Fd dir = open_for_load(err);
    if (dir.get() < 0)
        return std::nullopt;
    return load_pf_at(dir.get(), pf, err);
}

std::optional<PfJournalEntry> Journal::load_pf_at(int dirfd, const PciAddress& pf,
                                                  std::string* err) const {
    auto e = parse_at(dirfd, pf_name(pf), kMaxPfEntryBytes, parse_pf_journal, err);
    if (!e)
        return std::nullopt;
    if (e->pf != pf) {
        fail(err, pf_entry_path(pf) + ": names PF " + e->pf.str());
        return std::nullopt;
    }
    return e;
}

std::vector<PfJournalEntry> Journal::load_all_pfs(std::vector<std::string>* errors) const {
    std::vector<PfJournalEntry> out;
    each_name(errors, [&](int dirfd, const std::string& name, std::string* err) {
        if (auto pf = pf_of_name(name))
            if (auto e = load_pf_at(dirfd, *pf, err))
                out.push_back(*e);
    });
    return out;
}

int Journal::store_pf(const PfJournalEntry& entry) {
    return store_text(pf_name(entry.pf), serialize(entry));
}

int Journal::remove_pf(const PciAddress& pf) { return remove_name(pf_name(pf)); }

}  // namespace vfiod

// Mdev entries (DESIGN §12).

namespace vfiod {

namespace {

constexpr const char* kMdevMagic = "vfiod-mdev-journal 1";
constexpr const char* kMdevPrefix = "mdev-";

// A parent's or a type's name as sysfs has it: one path component, never "." or "..".
bool component(const std::string& s) {
    return !s.empty() && s.size() <= 255 && s != "." && s != ".." &&
           s.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

std::optional<std::string> parse_mdev_line(const std::string& key, const std::string& value,
                                           MdevJournalEntry& e) {
    if (key == "uuid") {
        if (!is_canonical_uuid(value))
            return "bad UUID '" + value + "'";
        e.uuid = value;
    } else if (key == "parent" || key == "type") {
        if (!component(value))
            return "bad " + key + " '" + value + "'";
        (key == "parent" ? e.parent : e.type) = value;
    } else if (key == "action") {
        if (value != "create" && value != "remove")
            return "unknown action '" + value + "'";
        e.create = value == "create";
    } else if (auto ph = key == "phase" ? from_string(value, kPfPhases) : std::nullopt) {
        e.phase = *ph;
    } else {
        return key == "phase" ? "unknown phase '" + value + "'" : "unknown key '" + key + "'";
    }
    return std::nullopt;
}

}  // namespace

std::string serialize(const MdevJournalEntry& e) {
    return std::string(kMdevMagic) + "\nuuid " + e.uuid + "\nparent " + e.parent + "\ntype " +
           e.type + "\naction " + (e.create ? "create" : "remove") + "\nphase " +
           to_string(e.phase) + "\n";
}

std::optional<MdevJournalEntry> parse_mdev_journal(const std::string& text, std::string* err) {
    return parse_strict(text, kMdevMagic, "vfiod mdev journal",
                        {"uuid", "parent", "type", "action", "phase"}, parse_mdev_line, err);
}

std::string Journal::mdev_entry_path(const std::string& uuid) const {
    return dir_ + "/" + kMdevPrefix + uuid;
}

std::vector<MdevJournalEntry> Journal::load_all_mdevs(std::vector<std::string>* errors) const {
    std::vector<MdevJournalEntry> out;
    each_name(errors, [&](int dirfd, const std::string& name, std::string* err) {
        if (name.rfind(kMdevPrefix, 0) != 0 || !is_canonical_uuid(name.substr(5)))
            return;
        auto e = parse_at(dirfd, name, kMaxMdevEntryBytes, parse_mdev_journal, err);
        if (e && kMdevPrefix + e->uuid != name)
            fail(err, dir_ + "/" + name + ": names mdev " + e->uuid);
        else if (e)
            out.push_back(std::move(*e));
    });
    return out;
}

int Journal::store_mdev(const MdevJournalEntry& entry) {
    if (!is_canonical_uuid(entry.uuid))
        return EINVAL;
    return store_text(kMdevPrefix + entry.uuid, serialize(entry));
}

int Journal::remove_mdev(const std::string& uuid) {
    if (!is_canonical_uuid(uuid))
        return EINVAL;
    return remove_name(kMdevPrefix + uuid);
}

}  // namespace vfiod
