#include "io/config_files.hpp"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "io/host_fs.hpp"

namespace vfiod {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxFileBytes = 1 << 20;

std::string error_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// What conf.d holds for us: "*.toml", not hidden ("x.toml", not ".x.toml" or "x.toml~").
bool is_confd_name(const std::string& n) {
    return n.size() > 5 && n.front() != '.' && n.ends_with(".toml");
}

// The conf.d beside a --config FILE.
std::vector<std::string> list_plain(const fs::path& dir, std::vector<std::string>& errors) {
    std::vector<std::string> names;
    std::error_code ec;
    auto st = fs::status(dir, ec);
    if (st.type() == fs::file_type::not_found)
        return {};
    if (!ec && !fs::is_directory(st)) {
        errors.push_back(dir.string() + ": not a directory");
        return {};
    }
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec))
        names.push_back(it->path().filename().string());
    if (ec) {
        errors.push_back(dir.string() + ": cannot list: " + ec.message());
        return {};
    }
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace

ReadStatus read_plain_file(const std::string& path, size_t limit, std::string* text,
                           std::string* why) {
    std::error_code ec;
    const fs::path p(path);
    auto st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found)
        return ReadStatus::Missing;
    if (ec) {
        *why = "cannot read: " + ec.message();
        return ReadStatus::Failed;
    }
    if (!fs::is_regular_file(st)) {
        *why = "cannot read: not a regular file";
        return ReadStatus::Failed;
    }
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        *why = "cannot read: " + error_text(errno);
        return ReadStatus::Failed;
    }
    // Read one byte past the cap instead of trusting file_size: the file may grow meanwhile.
    text->resize(limit + 1);
    in.read(text->data(), static_cast<std::streamsize>(text->size()));
    if (in.bad()) {
        *why = "cannot read: I/O error";
        return ReadStatus::Failed;
    }
    text->resize(static_cast<size_t>(in.gcount()));
    if (text->size() > limit) {
        *why = "larger than " + std::to_string(limit >> 20) + " MiB; refusing to read it";
        return ReadStatus::Failed;
    }
    return ReadStatus::Ok;
}

std::string ConfigSource::shown(const std::string& p) const {
    return host_ ? host_->path(p) : p;
}

ReadStatus ConfigSource::read(const std::string& p, std::string* text, std::string* why) const {
    if (!host_)
        return read_plain_file(p, kMaxFileBytes, text, why);  // --config FILE, as given
    using S = HostFs::WholeFile::Status;
    auto f = host_->read_whole(p, kMaxFileBytes);
    switch (f.status) {
    case S::Ok:
        *text = std::move(f.bytes);
        return ReadStatus::Ok;
    case S::Missing:
        return ReadStatus::Missing;
    case S::NotRegular:
        *why = "cannot read: not a regular file";
        break;
    case S::TooBig:
        *why = "larger than 1 MiB; refusing to read it";
        break;
    case S::Denied:
    case S::Failed:
        *why = "cannot read: " + error_text(f.err);
        break;
    }
    return ReadStatus::Failed;
}

std::vector<std::string> ConfigSource::list_confd(const std::string& dir,
                                                  std::vector<std::string>& errors) const {
    std::vector<std::string> names;
    if (!host_) {
        names = list_plain(dir, errors);
    } else {
        int err = 0;
        names = host_->list(dir, &err);
        // ENOTDIR also when a component above conf.d is a file: then conf.d is just missing.
        if (err == ENOTDIR && host_->exists(dir))
            errors.push_back(shown(dir) + ": not a directory");
        else if (err != 0 && err != ENOENT && err != ENOTDIR)
            errors.push_back(shown(dir) + ": cannot list: " + error_text(err));
        if (err != 0)
            return {};
    }
    std::vector<std::string> out;
    for (const auto& n : names)
        if (is_confd_name(n))
            out.push_back(dir + "/" + n);
    return out;
}

}  // namespace vfiod
