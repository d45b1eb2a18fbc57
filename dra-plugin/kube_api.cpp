// The API server client of vfiod-dra-plugin: kubeconfig and in-cluster discovery, and KubeApi
// over libcurl. Nothing here throws: yaml-cpp's and the allocator's exceptions are caught at
// the entry points, and no exception crosses a curl callback.
#include "kube_api.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace vfiod::dra {

namespace {

// A kubeconfig with embedded certificates is a few tens of kilobytes; a token, a CA bundle or a
// client key even less. Larger files are someone else's mistake, not ours to read whole.
constexpr size_t kMaxKubeconfig = 4 << 20;
constexpr size_t kMaxCredentialFile = 1 << 20;
constexpr size_t kMaxToken = 64 << 10;
constexpr long kConnectTimeoutMs = 10'000;
constexpr std::chrono::milliseconds kDefaultTimeout{30'000};
constexpr std::chrono::milliseconds kDefaultWatchIdle{300'000};
// Idle pooled handles kept for their connections; more concurrent callers just make new ones.
constexpr size_t kPoolSize = 4;
// The longest a watch sleeps without looking at `stop` when nobody wakes it (wake_watches).
constexpr std::chrono::milliseconds kWatchCheck{1000};

std::atomic<size_t> g_max_body_override{0};
std::atomic<size_t> g_max_held_override{0};
std::atomic<size_t> g_held{0};  // bytes of bodies held now, by every call of the process

size_t max_body() {
    size_t v = g_max_body_override.load(std::memory_order_relaxed);
    return v ? v : kMaxBody;
}

size_t max_held() {
    size_t v = g_max_held_override.load(std::memory_order_relaxed);
    return v ? v : kMaxBodiesHeld;
}

// One body's share of kMaxBodiesHeld: grown before the body grows, given back with the last
// holder (the call, then its ApiResponse).
struct HeldBytes {
    size_t bytes = 0;
    HeldBytes() = default;
    HeldBytes(const HeldBytes&) = delete;
    HeldBytes& operator=(const HeldBytes&) = delete;
    ~HeldBytes() { shrink_to(0); }
    // False, and nothing taken, when n more bytes would take the process past the total.
    bool grow(size_t n) {
        size_t cur = g_held.load();
        do {
            if (cur + n > max_held() || cur + n < cur)
                return false;
        } while (!g_held.compare_exchange_weak(cur, cur + n));
        bytes += n;
        return true;
    }
    void shrink_to(size_t n) {
        if (n < bytes) {
            g_held.fetch_sub(bytes - n);
            bytes = n;
        }
    }
};

// Reads a whole regular file of at most `limit` bytes. False and *err ("<path>: <why>").
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

bool base64_decode(const std::string& in, std::string* out) {
    out->clear();
    unsigned acc = 0;
    int bits = 0;
    size_t pad = 0;
    for (char c : in) {
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else if (c == '=') {
            ++pad;
            continue;
        } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        else
            return false;
        if (pad)  // data after padding
            return false;
        acc = (acc << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out->push_back(static_cast<char>((acc >> bits) & 0xff));
        }
    }
    return pad <= 2 && bits < 6;
}

bool looks_like_pem_cert(const std::string& s) {
    return s.find("-----BEGIN CERTIFICATE-----") != std::string::npos;
}

// ASCII only, whatever locale the process runs in.
bool ascii_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
        ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
        --e;
    return s.substr(b, e - b);
}

// A token goes into a header line: no control characters, no spaces.
bool valid_token(const std::string& t) {
    if (t.empty() || t.size() > kMaxToken)
        return false;
    for (char c : t)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
            return false;
    return true;
}

// https://host[:port][/prefix] with no trailing slash, no query, nothing a header or a log
// line could be confused by. False and *why otherwise.
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

// ---- kubeconfig ---------------------------------------------------------------------------

class KubeconfigReader {
public:
    KubeconfigReader(std::string path, std::string* err) : path_(std::move(path)), err_(err) {
        size_t slash = path_.rfind('/');
        dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    }

    bool load(ApiEndpoint* out) {
        std::string text, why;
        if (!read_small_file(path_, kMaxKubeconfig, &text, &why))
            return fail("cannot read it: " + why);
        YAML::Node root;
        try {
            root = YAML::Load(text);
        } catch (const YAML::Exception& e) {
            return fail("malformed YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                        std::to_string(e.mark.column + 1) + ": " + e.msg);
        }
        if (!root.IsMap())
            return fail("not a kubeconfig (the document is not a mapping)");

        std::string current;
        if (!scalar(root, "current-context", "", &current))
            return false;
        if (current.empty())
            return fail("no current-context");
        YAML::Node context, cluster, user;
        if (!find_named(root, "contexts", "context", current, "current-context", &context))
            return false;
        std::string cluster_name, user_name;
        std::string ctx_where = "context '" + current + "'";
        if (!scalar(context, "cluster", ctx_where, &cluster_name) ||
            !scalar(context, "user", ctx_where, &user_name))
            return false;
        if (cluster_name.empty())
            return fail(ctx_where + " names no cluster");
        if (user_name.empty())
            return fail(ctx_where + " names no user; vfiod-dra-plugin needs a token or a client "
                                    "certificate");
        if (!find_named(root, "clusters", "cluster", cluster_name, ctx_where, &cluster) ||
            !find_named(root, "users", "user", user_name, ctx_where, &user))
            return false;

        ApiEndpoint ep;
        ep.origin = "kubeconfig " + path_;
        if (!read_cluster(cluster, "cluster '" + cluster_name + "'", &ep) ||
            !read_user(user, "user '" + user_name + "'", &ep))
            return false;
        *out = std::move(ep);
        return true;
    }

private:
    bool fail(const std::string& what) {
        *err_ = "kubeconfig " + path_ + ": " + what;
        return false;
    }
    static std::string at(const YAML::Node& n) {
        YAML::Mark m = n.Mark();
        return m.is_null() ? std::string() : " (line " + std::to_string(m.line + 1) + ")";
    }
    static std::string prefix(const std::string& where) { return where.empty() ? "" : where + ": "; }

    // An optional string field: absent or null leaves *out empty.
    bool scalar(const YAML::Node& map, const char* key, const std::string& where,
                std::string* out) {
        out->clear();
        YAML::Node v = map[key];
        if (!v || v.IsNull())
            return true;
        if (!v.IsScalar())
            return fail(prefix(where) + key + " is not a string" + at(v));
        *out = v.Scalar();
        return true;
    }

    bool present(const YAML::Node& map, const char* key) {
        YAML::Node v = map[key];
        return v && !v.IsNull();
    }

    // The entry of list `list` (of {name, <field>: {...}}) called `name`: its <field> map.
    bool find_named(const YAML::Node& root, const char* list, const char* field,
                    const std::string& name, const std::string& named_by, YAML::Node* out) {
        YAML::Node seq = root[list];
        if (seq && !seq.IsNull() && !seq.IsSequence())
            return fail(std::string(list) + " is not a list" + at(seq));
        if (seq && seq.IsSequence())
            for (const YAML::Node& entry : seq) {
                if (!entry.IsMap())
                    return fail(std::string("an entry of ") + list + " is not a mapping" +
                                at(entry));
                YAML::Node n = entry["name"];
                if (!n || !n.IsScalar() || n.Scalar() != name)
                    continue;
                YAML::Node body = entry[field];
                if (!body || !body.IsMap())
                    return fail(std::string(field) + " '" + name + "' has no " + field +
                                " mapping" + at(entry));
                *out = body;
                return true;
            }
        return fail(std::string(field) + " '" + name + "', named by " + named_by +
                    ", is not in " + list);
    }

    std::string resolve(const std::string& file) const {
        if (file.empty() || file.front() == '/')
            return file;
        return dir_ + "/" + file;
    }

    // A file the endpoint names must be readable now: a typo is reported at start, naming it.
    bool readable(const std::string& where, const char* key, const std::string& file) {
        std::string content, why;
        if (!read_small_file(file, kMaxCredentialFile, &content, &why))
            return fail(where + ": " + key + " " + why);
        return true;
    }

    bool read_cluster(const YAML::Node& c, const std::string& where, ApiEndpoint* ep) {
        std::string why;
        if (!scalar(c, "server", where, &ep->server))
            return false;
        if (ep->server.empty())
            return fail(where + " has no server");
        if (!normalize_server(&ep->server, &why))
            return fail(where + ": server " + why);
        YAML::Node insecure = c["insecure-skip-tls-verify"];
        bool skip_verify = false;
        if (insecure && !insecure.IsNull() &&
            !(insecure.IsScalar() && YAML::convert<bool>::decode(insecure, skip_verify)))
            return fail(where + ": insecure-skip-tls-verify is not a boolean" + at(insecure));
        if (skip_verify)
            return fail(where + " sets insecure-skip-tls-verify, which vfiod-dra-plugin refuses: "
                                "the API server is verified against the cluster CA");
        for (const char* key : {"tls-server-name", "proxy-url"})
            if (present(c, key))
                return fail(where + " sets " + key + ", which vfiod-dra-plugin does not support");
        std::string ca_file, ca_data;
        if (!scalar(c, "certificate-authority", where, &ca_file) ||
            !scalar(c, "certificate-authority-data", where, &ca_data))
            return false;
        if (!ca_file.empty() && !ca_data.empty())
            return fail(where + " has both certificate-authority and certificate-authority-data");
        if (ca_file.empty() && ca_data.empty())
            return fail(where + " has no certificate-authority(-data); vfiod-dra-plugin verifies "
                                "the API server against the cluster CA only");
        if (!ca_data.empty()) {
            if (!base64_decode(ca_data, &ep->ca_data))
                return fail(where + ": certificate-authority-data is not base64");
            if (!looks_like_pem_cert(ep->ca_data))
                return fail(where + ": certificate-authority-data holds no PEM certificate");
        } else {
            ep->ca_file = resolve(ca_file);
            if (!readable(where, "certificate-authority", ep->ca_file))
                return false;
        }
        return true;
    }

    bool read_user(const YAML::Node& u, const std::string& where, ApiEndpoint* ep) {
        if (present(u, "exec"))
            return fail(where + " uses exec credentials, which vfiod-dra-plugin does not run; "
                                "give it a token, a token file or a client certificate");
        if (present(u, "auth-provider"))
            return fail(where + " uses an auth-provider, which vfiod-dra-plugin does not "
                                "support; give it a token, a token file or a client certificate");
        if (present(u, "username") || present(u, "password"))
            return fail(where + " uses basic authentication, which Kubernetes no longer has");
        for (const char* key : {"as", "as-uid", "as-groups", "as-user-extra"})
            if (present(u, key))
                return fail(where + " sets impersonation (" + key +
                            "), which vfiod-dra-plugin does not support");
        std::string token_file, cert, key, cert_data, key_data;
        if (!scalar(u, "token", where, &ep->token) ||
            !scalar(u, "tokenFile", where, &token_file) ||
            !scalar(u, "client-certificate", where, &cert) ||
            !scalar(u, "client-key", where, &key) ||
            !scalar(u, "client-certificate-data", where, &cert_data) ||
            !scalar(u, "client-key-data", where, &key_data))
            return false;
        ep->token = trim(ep->token);
        if (!ep->token.empty() && !valid_token(ep->token))
            return fail(where + ": token has spaces or control characters");
        if (!token_file.empty()) {
            ep->token_file = resolve(token_file);
            if (!readable(where, "tokenFile", ep->token_file))
                return false;
        }
        if (!cert.empty() && !cert_data.empty())
            return fail(where + " has both client-certificate and client-certificate-data");
        if (!key.empty() && !key_data.empty())
            return fail(where + " has both client-key and client-key-data");
        bool has_cert = !cert.empty() || !cert_data.empty();
        bool has_key = !key.empty() || !key_data.empty();
        if (has_cert != has_key)
            return fail(where + " has a client " + (has_cert ? "certificate without its key"
                                                             : "key without its certificate"));
        if (!cert_data.empty() && !base64_decode(cert_data, &ep->client_cert_data))
            return fail(where + ": client-certificate-data is not base64");
        if (!key_data.empty() && !base64_decode(key_data, &ep->client_key_data))
            return fail(where + ": client-key-data is not base64");
        if (!cert.empty()) {
            ep->client_cert_file = resolve(cert);
            if (!readable(where, "client-certificate", ep->client_cert_file))
                return false;
        }
        if (!key.empty()) {
            ep->client_key_file = resolve(key);
            if (!readable(where, "client-key", ep->client_key_file))
                return false;
        }
        if (ep->token.empty() && ep->token_file.empty() && !has_cert)
            return fail(where + " has no token, tokenFile or client certificate");
        return true;
    }

    std::string path_, dir_;
    std::string* err_;
};

// ---- the bearer token -----------------------------------------------------------------------

// The token from its file, re-read when the file's identity or size or mtime changes (kubelet
// rotates projected tokens by swapping a symlink, so the inode changes) and when a 401 says the
// one we sent is no longer good. The last good token stays in use while the file is unreadable.
// on_change runs (outside the lock) in the thread that read a token other than the last one.
class TokenSource {
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
class TokenWatch {
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

// ---- libcurl --------------------------------------------------------------------------------

void global_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlSlist {
    curl_slist* list = nullptr;
    ~CurlSlist() { curl_slist_free_all(list); }
    bool add(const std::string& s) {
        curl_slist* n = curl_slist_append(list, s.c_str());
        if (!n)
            return false;
        list = n;
        return true;
    }
};

// What the callbacks of one transfer share. Plain data: the callbacks catch everything.
struct Transfer {
    CURL* h = nullptr;
    size_t limit = 0;
    std::string body;
    bool too_big = false;
    std::shared_ptr<HeldBytes> held = std::make_shared<HeldBytes>();  // body's or pending's
    bool over_held = false;
    // Watches only.
    bool streaming = false;
    bool status_known = false;
    bool lines = false;  // a 2xx answer: the body is watch events, one a line
    const std::function<bool(const std::string&)>* on_line = nullptr;
    const std::atomic<bool>* stop = nullptr;
    std::string pending;
    bool caller_ended = false;
    std::string callback_error;
    std::chrono::steady_clock::time_point last_byte;
};

size_t on_header(char*, size_t size, size_t n, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    t->last_byte = std::chrono::steady_clock::now();
    return size * n;
}

size_t on_write(char* data, size_t size, size_t n, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    size_t len = size * n;
    try {
        t->last_byte = std::chrono::steady_clock::now();
        if (t->streaming && !t->status_known) {
            long status = 0;
            curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
            t->lines = status >= 200 && status < 300;
            t->status_known = true;
        }
        if (!t->lines) {
            if (t->body.size() + len > t->limit) {
                t->too_big = true;
                return 0;
            }
            if (!t->held->grow(len)) {
                t->over_held = true;
                return 0;
            }
            t->body.append(data, len);
            return len;
        }
        // Split into lines without copying the bulk twice: complete lines straight from `data`
        // when nothing is pending.
        size_t pos = 0;
        while (pos < len) {
            const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', len - pos));
            const size_t end = nl ? static_cast<size_t>(nl - data) : len;
            if (t->pending.size() + (end - pos) > t->limit) {
                t->too_big = true;
                return 0;
            }
            if (!t->held->grow(end - pos)) {
                t->over_held = true;
                return 0;
            }
            t->pending.append(data + pos, end - pos);
            if (!nl)
                break;
            pos = end + 1;
            if (!t->pending.empty() && t->pending.back() == '\r')
                t->pending.pop_back();
            if (!t->pending.empty()) {
                bool more = (*t->on_line)(t->pending);
                t->pending.clear();
                t->held->shrink_to(0);
                if (!more) {
                    t->caller_ended = true;
                    return 0;
                }
            }
            if (t->stop && t->stop->load()) {
                t->caller_ended = true;
                return 0;
            }
        }
        return len;
    } catch (const std::exception& e) {
        t->callback_error = std::string("the watch handler failed: ") + e.what();
    } catch (...) {
        t->callback_error = "the watch handler failed";
    }
    return 0;
}

int on_progress(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(userdata);
    return t->stop && t->stop->load() ? 1 : 0;
}

class CurlApi final : public KubeApi {
public:
    explicit CurlApi(ApiEndpoint ep)
        : ep_(std::move(ep)),
          token_(ep_.token_file, ep_.token, [this] { token_watch_.changed(); }),
          token_watch_(token_) {
        user_agent_ = std::string("vfiod-dra-plugin/") + VFIOD_VERSION;
    }

    ~CurlApi() override {
        for (CURL* h : pool_)
            curl_easy_cleanup(h);
    }

    // Checks what can be checked before the first call: the CA parses as PEM, the token reads.
    bool check(std::string* err) {
        std::string why;
        if (!normalize_server(&ep_.server, &why)) {
            *err = ep_.origin + ": server " + why;
            return false;
        }
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
        std::string tok;
        if (token_.from_file() && !token_.get(&tok, &why)) {
            *err = ep_.origin + ": " + why;
            return false;
        }
        return true;
    }

    uint64_t add_token_listener(std::function<void()> fn) override {
        return token_.from_file() ? token_watch_.add(std::move(fn)) : 0;
    }
    void remove_token_listener(uint64_t id) override { token_watch_.remove(id); }

    using KubeApi::request;
    ApiResponse request(const std::string& method, const std::string& path,
                        const std::string& body, std::chrono::milliseconds timeout,
                        size_t body_limit) override {
        ApiResponse r;
        try {
            r = call(method, path, body, timeout, body_limit, nullptr, nullptr, {});
        } catch (const std::exception& e) {
            r = fail(method, path, e.what());
        } catch (...) {
            r = fail(method, path, "unexpected failure");
        }
        return r;
    }

    ApiResponse watch(const std::string& path,
                      const std::function<bool(const std::string& line)>& on_line,
                      const std::atomic<bool>& stop, std::chrono::milliseconds idle) override {
        ApiResponse r;
        if (idle <= std::chrono::milliseconds::zero())
            idle = kDefaultWatchIdle;
        try {
            r = call("GET", path, "", idle, kMaxBody, &on_line, &stop, idle);
        } catch (const std::exception& e) {
            r = fail("GET", path, e.what());
        } catch (...) {
            r = fail("GET", path, "unexpected failure");
        }
        return r;
    }

private:
    ApiResponse fail(const std::string& method, const std::string& path, const std::string& why) {
        ApiResponse r;
        r.error = method + " " + ep_.server + path + ": " + why;
        return r;
    }

    CURL* acquire() {
        {
            std::lock_guard lock(pool_mu_);
            if (!pool_.empty()) {
                CURL* h = pool_.back();
                pool_.pop_back();
                curl_easy_reset(h);  // keeps the connection and TLS session caches
                return h;
            }
        }
        return curl_easy_init();
    }

    void release(CURL* h) {
        // Forget the finished call's options now: they point at its stack (error buffer,
        // headers, callbacks' data), and a later cleanup must not reach them.
        curl_easy_reset(h);
        {
            std::lock_guard lock(pool_mu_);
            if (pool_.size() < kPoolSize) {
                pool_.push_back(h);
                return;
            }
        }
        curl_easy_cleanup(h);
    }

    // One request, or a watch when on_line is given; a 401 re-reads the token file and tries
    // once more if the token changed.
    ApiResponse call(const std::string& method, const std::string& path, const std::string& body,
                     std::chrono::milliseconds timeout, size_t body_limit,
                     const std::function<bool(const std::string&)>* on_line,
                     const std::atomic<bool>* stop, std::chrono::milliseconds idle) {
        static const char* const kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
        bool known = false;
        for (const char* m : kMethods)
            known = known || method == m;
        if (!known)
            return fail(method, path, "unsupported method");
        if (path.empty() || path.front() != '/')
            return fail(method, path, "the path does not start with '/'");
        for (char c : path)
            if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '#')
                return fail(method, path, "the path has spaces or control characters");
        if (timeout <= std::chrono::milliseconds::zero())
            timeout = kDefaultTimeout;

        std::string token, why;
        bool with_token = !ep_.token.empty() || token_.from_file();
        if (with_token && !token_.get(&token, &why))
            return fail(method, path, why);
        ApiResponse r = perform_once(method, path, body, timeout, body_limit, on_line, stop, idle, token);
        if (r.status == 401 && token_.from_file()) {
            std::string fresh;
            if (token_.get(&fresh, &why, /*force=*/true) && fresh != token) {
                spdlog::info("{} {}: 401 Unauthorized; trying again with the re-read token",
                             method, path);
                r = perform_once(method, path, body, timeout, body_limit, on_line, stop, idle, fresh);
            }
        }
        return r;
    }

    ApiResponse perform_once(const std::string& method, const std::string& path,
                             const std::string& body, std::chrono::milliseconds timeout,
                             size_t body_limit,
                             const std::function<bool(const std::string&)>* on_line,
                             const std::atomic<bool>* stop, std::chrono::milliseconds idle,
                             const std::string& token) {
        global_init_once();
        const bool streaming = on_line != nullptr;
        // A watch gets a handle of its own that is not pooled: it drives it through a multi
        // handle so that a stop is seen when wake_watches() wakes it, which curl_easy_perform
        // cannot promise.
        CURL* h = streaming ? curl_easy_init() : acquire();
        if (!h)
            return fail(method, path, "curl_easy_init failed");
        struct Releaser {
            CurlApi* self;
            CURL* h;
            bool pooled;
            ~Releaser() {
                if (pooled) {
                    self->release(h);
                } else {
                    curl_easy_reset(h);  // as in release(): no pointer into a dead frame
                    curl_easy_cleanup(h);
                }
            }
        } releaser{this, h, !streaming};

        Transfer t;
        t.h = h;
        t.limit = std::min(body_limit, max_body());
        t.streaming = streaming;
        t.on_line = on_line;
        t.stop = stop;
        t.last_byte = std::chrono::steady_clock::now();
        char errbuf[CURL_ERROR_SIZE] = {};
        std::string url = ep_.server + path;

        CurlSlist headers;
        bool hdr_ok = headers.add("Accept: application/json") &&
                      headers.add(method == "PATCH" ? "Content-Type: application/merge-patch+json"
                                                    : "Content-Type: application/json") &&
                      headers.add("Expect:");  // the API server answers at once; no 100-continue
        if (!token.empty())
            hdr_ok = hdr_ok && headers.add("Authorization: Bearer " + token);
        if (!hdr_ok)
            return fail(method, path, "out of memory");

        bool set_ok = true;
        auto set = [&](CURLcode c) { set_ok = set_ok && c == CURLE_OK; };
        set(curl_easy_setopt(h, CURLOPT_URL, url.c_str()));
        set(curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https"));
        set(curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L));
        set(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L));
        set(curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1)));
        set(curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf));
        set(curl_easy_setopt(h, CURLOPT_USERAGENT, user_agent_.c_str()));
        set(curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list));
        // The cluster's CA only: Debian's libcurl would add /etc/ssl/certs as a CA path.
        set(curl_easy_setopt(h, CURLOPT_CAPATH, nullptr));
        set(curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L));
        set(curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L));
        // The CA and client certificate files are read here, never by libcurl: it would open a
        // FIFO and wait for ever, or read a huge file whole, and no timeout of ours would stop
        // it. read_small_file refuses both, as for the token file; and a rotated CA is used from
        // the next call on.
        std::string ca_read, cert_read, key_read, unread;
        auto pem = [&](const std::string& data, const std::string& file, std::string* read,
                       const char* what) -> const std::string* {
            if (file.empty())
                return &data;
            if (read_small_file(file, kMaxCredentialFile, read, &unread))
                return read;
            unread = what + (" " + unread);
            return nullptr;
        };
        const std::string* ca = pem(ep_.ca_data, ep_.ca_file, &ca_read, "CA");
        const std::string* cert = ca ? pem(ep_.client_cert_data, ep_.client_cert_file, &cert_read,
                                           "client certificate")
                                     : nullptr;
        const std::string* key =
            cert ? pem(ep_.client_key_data, ep_.client_key_file, &key_read, "client key") : nullptr;
        if (!key)
            return fail(method, path, unread);
        curl_blob ca_blob{const_cast<char*>(ca->data()), ca->size(), CURL_BLOB_NOCOPY};
        curl_blob cert_blob{const_cast<char*>(cert->data()), cert->size(), CURL_BLOB_NOCOPY};
        curl_blob key_blob{const_cast<char*>(key->data()), key->size(), CURL_BLOB_NOCOPY};
        set(curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca_blob));
        if (!cert->empty()) {
            set(curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert_blob));
            set(curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM"));
            set(curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key_blob));
            set(curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM"));
        }
        // The API server is reached directly, as the kubelet's own client would with no proxy
        // variables: a stray https_proxy must not carry the service-account token elsewhere.
        set(curl_easy_setopt(h, CURLOPT_PROXY, ""));
        set(curl_easy_setopt(h, CURLOPT_NOPROXY, "*"));
        set(curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                             std::min<long>(kConnectTimeoutMs, static_cast<long>(timeout.count()))));
        set(curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header));
        set(curl_easy_setopt(h, CURLOPT_HEADERDATA, &t));
        set(curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write));
        set(curl_easy_setopt(h, CURLOPT_WRITEDATA, &t));
        if (streaming) {
            set(curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L));
            set(curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L));
            set(curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress));
            set(curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t));
            // A backstop behind drive_watch's own idle check, which comes first.
            long idle_s = static_cast<long>((idle.count() + 999) / 1000) + 1;
            set(curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L));
            set(curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, idle_s));
        } else {
            set(curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count())));
            // Refused from the Content-Length already; the write callback counts the rest.
            set(curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(t.limit)));
        }
        if (method == "GET") {
            set(curl_easy_setopt(h, CURLOPT_HTTPGET, 1L));
        } else {
            if (method != "POST")
                set(curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str()));
            if (!body.empty() || method != "DELETE") {
                set(curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                                     static_cast<curl_off_t>(body.size())));
                set(curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data()));
            }
        }
        if (!set_ok)
            return fail(method, path, "libcurl refused an option (a build without HTTPS?)");

        CURLcode rc = CURLE_OK;
        bool stopped = false, idle_out = false;
        if (!streaming) {
            rc = curl_easy_perform(h);
        } else {
            rc = drive_watch(h, &t, idle, &stopped, &idle_out);
        }

        ApiResponse r;
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (t.caller_ended || stopped) {
            r.status = status;  // the caller ended it; nothing went wrong
            return r;
        }
        if (idle_out)
            return fail(method, path, "no data for " + std::to_string(idle.count()) + " ms");
        if (!t.callback_error.empty())
            return fail(method, path, t.callback_error);
        const char* what = streaming && t.lines ? "a watch event" : "the response body";
        if (t.too_big || rc == CURLE_FILESIZE_EXCEEDED)
            return fail(method, path, std::string(what) + " is over " + std::to_string(t.limit) +
                                          " bytes; refused");
        if (t.over_held)
            return fail(method, path,
                        std::string(what) + " would take the bodies the API client holds over " +
                            std::to_string(max_held()) + " bytes; refused (try again)");
        if (rc != CURLE_OK) {
            std::string why = curl_easy_strerror(rc);
            if (errbuf[0])
                why += std::string(" (") + errbuf + ")";
            return fail(method, path, why);
        }
        if (streaming && !t.pending.empty())
            spdlog::debug("GET {}: the watch ended inside an event; {} bytes dropped", path,
                          t.pending.size());
        r.status = status;
        r.body = std::move(t.body);
        t.held->shrink_to(r.body.size());  // a watch's partial last line is dropped
        r.held = std::move(t.held);
        return r;
    }

    void wake_watches() override {
        std::lock_guard lock(watches_mu_);
        for (CURLM* m : watches_)
            curl_multi_wakeup(m);
    }

    // Runs a watch on a multi handle of its own. It sleeps until a byte comes, its idle limit
    // is up, libcurl has a timer due, wake_watches() is called or kWatchCheck has passed (an
    // idle host's plugin wakes about once a second for it, not 20 times); then it looks at
    // `stop` and the idle clock.
    CURLcode drive_watch(CURL* h, Transfer* t, std::chrono::milliseconds idle, bool* stopped,
                         bool* idle_out) {
        CURLM* m = curl_multi_init();
        if (!m)
            return CURLE_OUT_OF_MEMORY;
        if (curl_multi_add_handle(m, h) != CURLM_OK) {
            curl_multi_cleanup(m);
            return CURLE_FAILED_INIT;
        }
        {
            // Registered before `stop` is first read: a stop whose wake came earlier is seen.
            std::lock_guard lock(watches_mu_);
            watches_.push_back(m);
        }
        CURLcode rc = CURLE_OK;
        bool done = false;
        while (!done) {
            int running = 0;
            if (curl_multi_perform(m, &running) != CURLM_OK) {
                rc = CURLE_RECV_ERROR;
                break;
            }
            int queued = 0;
            while (CURLMsg* msg = curl_multi_info_read(m, &queued))
                if (msg->msg == CURLMSG_DONE && msg->easy_handle == h) {
                    rc = msg->data.result;
                    done = true;
                }
            if (done || running == 0)
                break;
            if (t->stop->load()) {
                *stopped = true;
                break;
            }
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                t->last_byte + idle - std::chrono::steady_clock::now());
            if (left < std::chrono::milliseconds(0)) {
                *idle_out = true;
                break;
            }
            // +1: woken by the idle limit itself, not a millisecond before it.
            curl_multi_poll(m, nullptr, 0, static_cast<int>(std::min(left, kWatchCheck).count()) + 1,
                            nullptr);
        }
        {
            std::lock_guard lock(watches_mu_);
            watches_.erase(std::find(watches_.begin(), watches_.end(), m));
        }
        if (!done && !*stopped && !*idle_out && rc == CURLE_OK && t->stop->load())
            *stopped = true;
        curl_multi_remove_handle(m, h);
        curl_multi_cleanup(m);
        if (rc == CURLE_ABORTED_BY_CALLBACK && t->stop->load())
            *stopped = true;
        return rc;
    }

    ApiEndpoint ep_;
    TokenSource token_;
    TokenWatch token_watch_;
    std::string user_agent_;
    std::mutex pool_mu_;
    std::vector<CURL*> pool_;
    std::mutex watches_mu_;
    std::vector<CURLM*> watches_;  // running watches' multi handles, for wake_watches()
};

}  // namespace

bool load_kubeconfig(const std::string& path, ApiEndpoint* out, std::string* err) {
    try {
        KubeconfigReader reader(path, err);
        return reader.load(out);
    } catch (const YAML::Exception& e) {
        *err = "kubeconfig " + path + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg;
    } catch (const std::exception& e) {
        *err = "kubeconfig " + path + ": " + e.what();
    }
    return false;
}

bool in_cluster_endpoint(const std::string& sa_dir, ApiEndpoint* out, std::string* err) {
    try {
        const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
        const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !*host || !port || !*port) {
            *err = "not in a pod (KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT unset): "
                   "give --kubeconfig or --api-server";
            return false;
        }
        std::string h = host, p = port;
        for (char c : p)
            if (c < '0' || c > '9') {
                *err = "KUBERNETES_SERVICE_PORT '" + p + "' is not a port number";
                return false;
            }
        for (char c : h)
            if (!(ascii_alnum(c) || c == '.' || c == '-' ||
                  c == ':' || c == '%')) {
                *err = "KUBERNETES_SERVICE_HOST '" + h + "' is not a host name or address";
                return false;
            }
        ApiEndpoint ep;
        ep.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + p;
        ep.token_file = sa_dir + "/token";
        ep.ca_file = sa_dir + "/ca.crt";
        ep.origin = "in-cluster service account " + sa_dir;
        std::string content, why;
        for (const std::string* f : {&ep.token_file, &ep.ca_file})
            if (!read_small_file(*f, kMaxCredentialFile, &content, &why)) {
                *err = ep.origin + ": " + why;
                return false;
            }
        *out = std::move(ep);
        return true;
    } catch (const std::exception& e) {
        *err = std::string("in-cluster endpoint: ") + e.what();
        return false;
    }
}

bool in_cluster_endpoint(ApiEndpoint* out, std::string* err) {
    return in_cluster_endpoint("/var/run/secrets/kubernetes.io/serviceaccount", out, err);
}

std::unique_ptr<KubeApi> make_curl_api(const ApiEndpoint& endpoint, std::string* err) {
    try {
        global_init_once();
        auto api = std::make_unique<CurlApi>(endpoint);
        if (!api->check(err))
            return nullptr;
        return api;
    } catch (const std::exception& e) {
        *err = endpoint.origin + ": " + e.what();
        return nullptr;
    }
}

void set_max_body_for_tests(size_t limit) {
    g_max_body_override.store(limit, std::memory_order_relaxed);
}

void set_max_bodies_held_for_tests(size_t limit) {
    g_max_held_override.store(limit, std::memory_order_relaxed);
}

size_t bodies_held_for_tests() { return g_held.load(); }

std::string ApiResponse::describe() const {
    if (status == 0)
        return error.empty() ? "no answer" : error;
    std::string out = "HTTP " + std::to_string(status);
    // Errors come as a v1 Status; anything else (a proxy's HTML page, garbage) is shown as a
    // short, printable excerpt so one log line stays one line.
    if (body.empty())
        return out;
    if (body.size() <= (1u << 20)) {
        nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (j.is_object()) {
            auto kind = j.find("kind");
            auto message = j.find("message");
            if (kind != j.end() && kind->is_string() && *kind == "Status" && message != j.end() &&
                message->is_string())
                return out + ": " + message->get<std::string>();
        }
    }
    if (ok())
        return out;
    std::string excerpt;
    for (char c : body.substr(0, 200))
        excerpt.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
    return out + ": " + excerpt + (body.size() > 200 ? "..." : "");
}

std::string query_escape(const std::string& s) {
    static const char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size() * 3);
    for (char c : s) {
        auto u = static_cast<unsigned char>(c);
        if (ascii_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
            out.push_back(c);
        } else {
            out.push_back('%');
            out.push_back(kHex[u >> 4]);
            out.push_back(kHex[u & 15]);
        }
    }
    return out;
}

}  // namespace vfiod::dra
