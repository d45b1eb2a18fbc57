#include "io/config_files.hpp"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <system_error>

namespace vfiod {

namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kMaxFileBytes = 1 << 20;

}  // namespace

ReadStatus read_config_file(const fs::path& p, std::string* text, std::string* why) {
    std::error_code ec;
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
        *why = "cannot read: " + std::error_code(errno, std::generic_category()).message();
        return ReadStatus::Failed;
    }
    // Read one byte past the cap instead of trusting file_size: the file may grow meanwhile.
    text->resize(kMaxFileBytes + 1);
    in.read(text->data(), static_cast<std::streamsize>(text->size()));
    if (in.bad()) {
        *why = "cannot read: I/O error";
        return ReadStatus::Failed;
    }
    text->resize(static_cast<size_t>(in.gcount()));
    if (text->size() > kMaxFileBytes) {
        *why = "larger than 1 MiB; refusing to read it";
        return ReadStatus::Failed;
    }
    return ReadStatus::Ok;
}

std::vector<fs::path> list_confd(const fs::path& dir, std::vector<std::string>& errors) {
    std::vector<fs::path> out;
    std::error_code ec;
    auto st = fs::status(dir, ec);
    if (st.type() == fs::file_type::not_found)
        return out;
    if (!ec && !fs::is_directory(st)) {
        errors.push_back(dir.string() + ": not a directory");
        return out;
    }
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        auto n = it->path().filename().string();
        if (n.size() > 5 && n.front() != '.' && n.ends_with(".toml"))
            out.push_back(it->path());
    }
    if (ec) {
        errors.push_back(dir.string() + ": cannot list: " + ec.message());
        return {};
    }
    std::sort(out.begin(), out.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
    return out;
}

}  // namespace vfiod
