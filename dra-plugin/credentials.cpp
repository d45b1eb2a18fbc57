#include "credentials.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace vfiod::dra {

namespace {

constexpr size_t kMaxToken = 64 << 10;

}  // namespace

bool read_small_file(const std::string& path, size_t limit, std::string* out, std::string* err) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        *err = path + ": " + std::strerror(errno);
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *err = path + ": not a regular file";
        ::close(fd);
        return false;
    }
    if (static_cast<unsigned long long>(st.st_size) > limit) {
        *err = path + ": larger than " + std::to_string(limit) + " bytes";
        ::close(fd);
        return false;
    }
    out->clear();
    char buf[16384];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *err = path + ": " + std::strerror(errno);
            ::close(fd);
            return false;
        }
        if (n == 0)
            break;
        // The file may grow between fstat and read.
        if (out->size() + static_cast<size_t>(n) > limit) {
            *err = path + ": larger than " + std::to_string(limit) + " bytes";
            ::close(fd);
            return false;
        }
        out->append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return true;
}

bool looks_like_pem_cert(const std::string& s) {
    return s.find("-----BEGIN CERTIFICATE-----") != std::string::npos;
}

std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
        ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
        --e;
    return s.substr(b, e - b);
}

bool valid_token(const std::string& t) {
    if (t.empty() || t.size() > kMaxToken)
        return false;
    for (char c : t)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
            return false;
    return true;
}

bool normalize_server(std::string* server, std::string* why) {
    std::string& s = *server;
    if (s.rfind("http://", 0) == 0) {
        *why = "plain http:// is refused; the API server must be reached over https://";
        return false;
    }
    if (s.rfind("https://", 0) != 0) {
        *why = "'" + s + "' is not an https:// URL";
        return false;
    }
    for (char c : s)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '?' || c == '#') {
            *why = "'" + s + "' is not a plain https:// URL (spaces, control characters, a "
                             "query or a fragment)";
            return false;
        }
    while (s.size() > 8 && s.back() == '/')
        s.pop_back();
    if (s.size() <= 8) {
        *why = "'" + s + "' names no host";
        return false;
    }
    return true;
}

// The token from its file, re-read when the file's identity or size or mtime changes (kubelet
// rotates projected tokens by swapping a symlink, so the inode changes) and when a 401 says the
// one we sent is no longer good. The last good token stays in use while the file is unreadable.
// on_change runs (outside the lock) in the thread that read a token other than the last one.
class Credentials::TokenSource {
public:
    TokenSource(std::string file, std::string literal, std::function<void()> on_change)
        : file_(std::move(file)), token_(std::move(literal)), on_change_(std::move(on_change)) {}

    bool from_file() const { return !file_.empty(); }
    const std::string& file() const { return file_; }

    // The token to send; false and *err when there is none.
    bool get(std::string* token, std::string* err, bool force = false) {
        bool changed = false, ok = false;
        {
            std::lock_guard lock(mu_);
            if (!file_.empty())
                changed = refresh_locked(force);
            ok = !token_.empty();
            if (ok)
                *token = token_;
            else
                *err = "token file " + file_ + ": " + (last_error_.empty() ? "empty" : last_error_);
        }
        if (changed)
            on_change_();
        return ok;
    }

private:
    // True when a token other than the last one was read.
    bool refresh_locked(bool force) {
        struct stat st {};
        if (::stat(file_.c_str(), &st) != 0) {
            note_error(std::strerror(errno));
            return false;
        }
        bool same = have_stat_ && st.st_dev == st_.st_dev && st.st_ino == st_.st_ino &&
                    st.st_size == st_.st_size && st.st_mtim.tv_sec == st_.st_mtim.tv_sec &&
                    st.st_mtim.tv_nsec == st_.st_mtim.tv_nsec;
        if (same && !force)
            return false;
        std::string content, why;
        if (!read_small_file(file_, kMaxToken, &content, &why)) {
            note_error(why);
            return false;
        }
        content = trim(content);
        if (!valid_token(content)) {
            note_error(content.empty() ? "empty" : "has spaces or control characters");
            return false;
        }
        bool changed = content != token_;
        if (have_stat_ && changed)
            spdlog::info("token file {} changed; using the new token", file_);
        st_ = st;
        have_stat_ = true;
        token_ = std::move(content);
        last_error_.clear();
        return changed;
    }

    void note_error(const std::string& why) {
        if (why != last_error_)
            spdlog::warn("token file {}: {}{}", file_, why,
                         token_.empty() ? "" : "; still using the last token read");
        last_error_ = why;
        // Read again next time whatever the stat says: the file may be fixed in place.
        have_stat_ = false;
    }

    std::mutex mu_;
    std::string file_;
    std::string token_;
    std::function<void()> on_change_;
    std::string last_error_;
    struct stat st_ {};
    bool have_stat_ = false;
};

// Listeners told at once when the kubelet rotates the token. It writes a new timestamped
// directory beside the old one, points the `..data` symlink at it by renaming a new link over
// it, and deletes the old one (the token file is a link into `..data`): a watch on the file, or
// on what it resolves to, dies at the first rotation; one on its directory sees every swap. One
// thread, started with the first listener, asleep in poll(2) until the directory changes; it
// re-reads the token after each burst of events, at most 10 times a second, and every 10 s
// while the directory cannot be watched.
class Credentials::TokenWatch {
public:
    explicit TokenWatch(TokenSource& token) : token_(token) {}
    ~TokenWatch() {
        if (thread_.joinable()) {
            uint64_t one = 1;
            (void)!::write(stop_fd_, &one, sizeof one);
            thread_.join();
        }
        for (int fd : {stop_fd_, inotify_fd_})
            if (fd >= 0)
                ::close(fd);
    }
    TokenWatch(const TokenWatch&) = delete;
    TokenWatch& operator=(const TokenWatch&) = delete;

    uint64_t add(std::function<void()> fn) {
        std::lock_guard lock(mu_);
        if (!std::exchange(started_, true))
            start();
        listeners_[++next_id_] = std::move(fn);
        return next_id_;
    }
    void remove(uint64_t id) {
        std::lock_guard lock(mu_);  // and so no longer running either
        listeners_.erase(id);
    }
    // The token source read a new token (on this thread or a request's).
    void changed() {
        std::lock_guard lock(mu_);
        for (auto& [id, fn] : listeners_)
            fn();
    }

private:
    static constexpr uint32_t kMask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                      IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF |
                                      IN_MOVE_SELF | IN_ONLYDIR;

    void start() {
        stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (stop_fd_ < 0 || inotify_fd_ < 0) {
            spdlog::warn("token file {}: cannot watch it ({}); a rotated token is read at the "
                         "next request",
                         token_.file(), std::strerror(errno));
            return;
        }
        thread_ = std::thread([this] { run(); });
    }

    // False when stop came within `ms` (-1: wait for it or an event).
    bool wait(int ms, bool events) {
        pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
        if (::poll(fds, events ? 2 : 1, ms) < 0 && errno != EINTR)
            return false;
        return !fds[0].revents;
    }

    void run() {
        const std::string& file = token_.file();
        const size_t slash = file.rfind('/');
        const std::string dir =
            slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
        int wd = -1;
        bool warned = false;
        while (true) {
            if (wd < 0) {
                wd = ::inotify_add_watch(inotify_fd_, dir.c_str(), kMask);
                if (wd >= 0)
                    warned = false;
                else if (!std::exchange(warned, true))
                    spdlog::warn("token file {}: cannot watch its directory ({}); looking for a "
                                 "rotated token every 10 s",
                                 file, std::strerror(errno));
            }
            // After the events, and after a new watch (a rotation before it made none).
            std::string token, why;
            token_.get(&token, &why);  // tells changed() when it is another token
            // A swap is a burst of events: they are taken together.
            if (!wait(100, false) || !wait(wd < 0 ? 10'000 : -1, true))
                return;
            alignas(inotify_event) char buf[4096];
            ssize_t n = 0;
            while ((n = ::read(inotify_fd_, buf, sizeof buf)) > 0)
                for (ssize_t at = 0; at < n;) {
                    const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
                    // The directory went (or moved): watch whatever has its name now.
                    if (e->wd == wd && (e->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))) {
                        ::inotify_rm_watch(inotify_fd_, wd);
                        wd = -1;
                    }
                    at += ssize_t(sizeof(inotify_event) + e->len);
                }
        }
    }

    TokenSource& token_;
    std::mutex mu_;
    std::map<uint64_t, std::function<void()>> listeners_;
    uint64_t next_id_ = 0;
    bool started_ = false;
    int stop_fd_ = -1, inotify_fd_ = -1;
    std::thread thread_;
};

Credentials::Credentials(const ApiEndpoint& ep)
    : ep_(ep),
      token_(std::make_unique<TokenSource>(ep_.token_file, ep_.token,
                                           [this] { watch_->changed(); })),
      watch_(std::make_unique<TokenWatch>(*token_)) {}

Credentials::~Credentials() = default;

bool Credentials::check(std::string* err) {
    std::string why;
    if (ep_.ca_file.empty() == ep_.ca_data.empty()) {
        *err = ep_.origin + ": give exactly one of a CA file and CA data";
        return false;
    }
    if (!ep_.ca_file.empty()) {
        std::string pem;
        if (!read_small_file(ep_.ca_file, kMaxCredentialFile, &pem, &why)) {
            *err = ep_.origin + ": CA " + why;
            return false;
        }
        if (!looks_like_pem_cert(pem)) {
            *err = ep_.origin + ": CA " + ep_.ca_file + " holds no PEM certificate";
            return false;
        }
    } else if (!looks_like_pem_cert(ep_.ca_data)) {
        *err = ep_.origin + ": the CA data holds no PEM certificate";
        return false;
    }
    return check_identity(err);
}

bool Credentials::check_identity(std::string* err) {
    bool cert = !ep_.client_cert_file.empty() || !ep_.client_cert_data.empty();
    bool key = !ep_.client_key_file.empty() || !ep_.client_key_data.empty();
    if (cert != key) {
        *err = ep_.origin + ": a client certificate needs its key and a key its certificate";
        return false;
    }
    if (!cert && ep_.token.empty() && ep_.token_file.empty()) {
        *err = ep_.origin + ": no token, token file or client certificate";
        return false;
    }
    if (!ep_.token.empty() && !valid_token(ep_.token)) {
        *err = ep_.origin + ": the token has spaces or control characters";
        return false;
    }
    std::string tok, why;
    if (token_->from_file() && !token_->get(&tok, &why)) {
        *err = ep_.origin + ": " + why;
        return false;
    }
    return true;
}

bool Credentials::with_token() const { return !ep_.token.empty() || token_->from_file(); }

bool Credentials::token(std::string* out, std::string* err, bool force) {
    return token_->get(out, err, force);
}

bool Credentials::token_from_file() const { return token_->from_file(); }

bool Credentials::tls(Tls* out, std::string* err) const {
    auto pem = [&](const std::string& data, const std::string& file, std::string* into,
                   const char* what) {
        if (file.empty()) {
            *into = data;
            return true;
        }
        if (read_small_file(file, kMaxCredentialFile, into, err))
            return true;
        *err = what + (" " + *err);
        return false;
    };
    return pem(ep_.ca_data, ep_.ca_file, &out->ca, "CA") &&
           pem(ep_.client_cert_data, ep_.client_cert_file, &out->cert, "client certificate") &&
           pem(ep_.client_key_data, ep_.client_key_file, &out->key, "client key");
}

uint64_t Credentials::add_token_listener(std::function<void()> fn) {
    return token_->from_file() ? watch_->add(std::move(fn)) : 0;
}

void Credentials::remove_token_listener(uint64_t id) { watch_->remove(id); }

}  // namespace vfiod::dra
