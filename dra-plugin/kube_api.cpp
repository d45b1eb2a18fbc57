// The API server client of vfiod-dra-plugin: KubeApi over libcurl, the HTTP transport only
// (where the server is: kube_config.cpp; the token and the PEM: credentials.cpp). Nothing here
// throws: the allocator's exceptions are caught at the entry points, and no exception crosses a
// curl callback.
#include "kube_api.hpp"

#include "core/strings.hpp"
#include "credentials.hpp"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

namespace vfiod::dra {

namespace {

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

// One call as its caller asked for it: a request, or a watch when on_line is given.
struct Call {
    const std::string& method;
    const std::string& path;
    const std::string& body;
    std::chrono::milliseconds timeout;
    size_t body_limit;
    const std::function<bool(const std::string&)>* on_line = nullptr;
    const std::atomic<bool>* stop = nullptr;
    std::chrono::milliseconds idle{};
    bool streaming() const { return on_line != nullptr; }
};

// A watch's side of a transfer: the stream of a 2xx answer, cut into lines for on_line.
struct WatchLines {
    const std::function<bool(const std::string&)>* on_line = nullptr;
    const std::atomic<bool>* stop = nullptr;
    bool status_known = false;
    bool lines = false;  // a 2xx answer: the body is watch events, one a line
    std::string pending;
    bool caller_ended = false;
};

// What the callbacks of one transfer share. Plain data: the callbacks catch everything.
struct Transfer {
    CURL* h = nullptr;
    size_t limit = 0;
    std::string body;
    bool too_big = false;
    std::shared_ptr<HeldBytes> held = std::make_shared<HeldBytes>();  // body's or pending's
    bool over_held = false;
    bool streaming = false;
    WatchLines watch;  // watches only
    std::string callback_error;
    std::chrono::steady_clock::time_point last_byte;
};

size_t on_header(char*, size_t size, size_t n, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    t->last_byte = std::chrono::steady_clock::now();
    return size * n;
}

// A whole answer's bytes (a request's, or a watch's error Status) into its body.
size_t append_body(Transfer* t, const char* data, size_t len) {
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

// A watch's bytes, split into lines without copying the bulk twice: complete lines straight
// from `data` when nothing is pending.
size_t split_lines(Transfer* t, const char* data, size_t len) {
    WatchLines& w = t->watch;
    size_t pos = 0;
    while (pos < len) {
        const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', len - pos));
        const size_t end = nl ? static_cast<size_t>(nl - data) : len;
        if (w.pending.size() + (end - pos) > t->limit) {
            t->too_big = true;
            return 0;
        }
        if (!t->held->grow(end - pos)) {
            t->over_held = true;
            return 0;
        }
        w.pending.append(data + pos, end - pos);
        if (!nl)
            break;
        pos = end + 1;
        if (!w.pending.empty() && w.pending.back() == '\r')
            w.pending.pop_back();
        if (!w.pending.empty()) {
            bool more = (*w.on_line)(w.pending);
            w.pending.clear();
            t->held->shrink_to(0);
            if (!more) {
                w.caller_ended = true;
                return 0;
            }
        }
        if (w.stop && w.stop->load()) {
            w.caller_ended = true;
            return 0;
        }
    }
    return len;
}

size_t on_write(char* data, size_t size, size_t n, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    size_t len = size * n;
    try {
        t->last_byte = std::chrono::steady_clock::now();
        if (t->streaming && !t->watch.status_known) {
            long status = 0;
            curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
            t->watch.lines = status >= 200 && status < 300;
            t->watch.status_known = true;
        }
        return t->watch.lines ? split_lines(t, data, len) : append_body(t, data, len);
    } catch (const std::exception& e) {
        t->callback_error = std::string("the watch handler failed: ") + e.what();
    } catch (...) {
        t->callback_error = "the watch handler failed";
    }
    return 0;
}

int on_progress(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(userdata);
    return t->watch.stop && t->watch.stop->load() ? 1 : 0;
}

// A handle's options, set one after another; ok turns false at the first one libcurl refuses.
struct CurlOptions {
    CURL* h;
    bool ok = true;
    template <class T>
    void set(CURLoption option, T value) {
        ok = ok && curl_easy_setopt(h, option, value) == CURLE_OK;
    }
};

// The request's headers: JSON both ways, the token when there is one.
bool add_headers(const std::string& method, const std::string& token, CurlSlist* headers) {
    bool ok = headers->add("Accept: application/json") &&
              headers->add(method == "PATCH" ? "Content-Type: application/merge-patch+json"
                                             : "Content-Type: application/json") &&
              headers->add("Expect:");  // the API server answers at once; no 100-continue
    if (!token.empty())
        ok = ok && headers->add("Authorization: Bearer " + token);
    return ok;
}

// Where the call goes and how the server is checked: https only, no redirects, the cluster's
// CA only.
void set_endpoint(CurlOptions& o, const std::string& url, const std::string& user_agent,
                  const CurlSlist& headers, char* errbuf) {
    o.set(CURLOPT_URL, url.c_str());
    o.set(CURLOPT_PROTOCOLS_STR, "https");
    o.set(CURLOPT_FOLLOWLOCATION, 0L);
    o.set(CURLOPT_NOSIGNAL, 1L);
    o.set(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    o.set(CURLOPT_ERRORBUFFER, errbuf);
    o.set(CURLOPT_USERAGENT, user_agent.c_str());
    o.set(CURLOPT_HTTPHEADER, headers.list);
    // The cluster's CA only: Debian's libcurl would add /etc/ssl/certs as a CA path.
    o.set(CURLOPT_CAPATH, static_cast<char*>(nullptr));
    o.set(CURLOPT_SSL_VERIFYPEER, 1L);
    o.set(CURLOPT_SSL_VERIFYHOST, 2L);
}

// The PEM of this call, from memory (libcurl keeps pointers to `pem`, which outlives the call).
void set_tls(CurlOptions& o, Credentials::Tls& pem) {
    curl_blob ca_blob{pem.ca.data(), pem.ca.size(), CURL_BLOB_NOCOPY};
    curl_blob cert_blob{pem.cert.data(), pem.cert.size(), CURL_BLOB_NOCOPY};
    curl_blob key_blob{pem.key.data(), pem.key.size(), CURL_BLOB_NOCOPY};
    o.set(CURLOPT_CAINFO_BLOB, &ca_blob);
    if (!pem.cert.empty()) {
        o.set(CURLOPT_SSLCERT_BLOB, &cert_blob);
        o.set(CURLOPT_SSLCERTTYPE, "PEM");
        o.set(CURLOPT_SSLKEY_BLOB, &key_blob);
        o.set(CURLOPT_SSLKEYTYPE, "PEM");
    }
}

// The transfer's bounds and callbacks: a request's time limit and body limit, or a watch's
// idle limit and the progress callback that sees `stop`.
void set_transfer(CurlOptions& o, const Call& c, Transfer* t) {
    // The API server is reached directly, as the kubelet's own client would with no proxy
    // variables: a stray https_proxy must not carry the service-account token elsewhere.
    o.set(CURLOPT_PROXY, "");
    o.set(CURLOPT_NOPROXY, "*");
    o.set(CURLOPT_CONNECTTIMEOUT_MS,
          std::min<long>(kConnectTimeoutMs, static_cast<long>(c.timeout.count())));
    o.set(CURLOPT_HEADERFUNCTION, on_header);
    o.set(CURLOPT_HEADERDATA, t);
    o.set(CURLOPT_WRITEFUNCTION, on_write);
    o.set(CURLOPT_WRITEDATA, t);
    if (c.streaming()) {
        o.set(CURLOPT_TCP_KEEPALIVE, 1L);
        o.set(CURLOPT_NOPROGRESS, 0L);
        o.set(CURLOPT_XFERINFOFUNCTION, on_progress);
        o.set(CURLOPT_XFERINFODATA, t);
        // A backstop behind drive_watch's own idle check, which comes first.
        long idle_s = static_cast<long>((c.idle.count() + 999) / 1000) + 1;
        o.set(CURLOPT_LOW_SPEED_LIMIT, 1L);
        o.set(CURLOPT_LOW_SPEED_TIME, idle_s);
    } else {
        o.set(CURLOPT_TIMEOUT_MS, static_cast<long>(c.timeout.count()));
        // Refused from the Content-Length already; the write callback counts the rest.
        o.set(CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(t->limit));
    }
}

void set_method(CurlOptions& o, const Call& c) {
    if (c.method == "GET") {
        o.set(CURLOPT_HTTPGET, 1L);
        return;
    }
    if (c.method != "POST")
        o.set(CURLOPT_CUSTOMREQUEST, c.method.c_str());
    if (!c.body.empty() || c.method != "DELETE") {
        o.set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(c.body.size()));
        o.set(CURLOPT_POSTFIELDS, c.body.data());
    }
}

// How a watch's loop ended, when it was not by the transfer's own end.
struct WatchEnd {
    bool stopped = false;   // `stop`, or on_line said no more
    bool idle_out = false;  // no byte for the idle limit
};

class CurlApi final : public KubeApi {
public:
    explicit CurlApi(ApiEndpoint ep) : ep_(std::move(ep)), creds_(ep_) {
        user_agent_ = std::string("vfiod-dra-plugin/") + VFIOD_VERSION;
    }

    ~CurlApi() override {
        for (CURL* h : pool_)
            curl_easy_cleanup(h);
    }

    // Checks what can be checked before the first call: the server's URL, then the credentials.
    bool check(std::string* err) {
        std::string why;
        if (!normalize_server(&ep_.server, &why)) {
            *err = ep_.origin + ": server " + why;
            return false;
        }
        return creds_.check(err);
    }

    uint64_t add_token_listener(std::function<void()> fn) override {
        return creds_.add_token_listener(std::move(fn));
    }
    void remove_token_listener(uint64_t id) override { creds_.remove_token_listener(id); }

    using KubeApi::request;
    ApiResponse request(const std::string& method, const std::string& path,
                        const std::string& body, std::chrono::milliseconds timeout,
                        size_t body_limit) override {
        ApiResponse r;
        try {
            r = call(Call{method, path, body, timeout, body_limit});
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
            const std::string get = "GET", no_body;
            r = call(Call{get, path, no_body, idle, kMaxBody, &on_line, &stop, idle});
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

    // One request, or a watch when c.on_line is given; a 401 re-reads the token file and tries
    // once more if the token changed.
    ApiResponse call(Call c) {
        if (std::string why; !valid_call(c, &why))
            return fail(c.method, c.path, why);
        if (c.timeout <= std::chrono::milliseconds::zero())
            c.timeout = kDefaultTimeout;
        std::string token, why;
        if (creds_.with_token() && !creds_.token(&token, &why))
            return fail(c.method, c.path, why);
        ApiResponse r = perform_once(c, token);
        if (r.status == 401 && creds_.token_from_file()) {
            std::string fresh;
            if (creds_.token(&fresh, &why, /*force=*/true) && fresh != token) {
                spdlog::info("{} {}: 401 Unauthorized; trying again with the re-read token",
                             c.method, c.path);
                r = perform_once(c, fresh);
            }
        }
        return r;
    }

    static bool valid_call(const Call& c, std::string* why) {
        static const char* const kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
        bool known = false;
        for (const char* m : kMethods)
            known = known || c.method == m;
        if (!known) {
            *why = "unsupported method";
            return false;
        }
        if (c.path.empty() || c.path.front() != '/') {
            *why = "the path does not start with '/'";
            return false;
        }
        for (char ch : c.path)
            if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f || ch == '#') {
                *why = "the path has spaces or control characters";
                return false;
            }
        return true;
    }

    // Gives a handle back when the call is over: to the pool, or (a watch's) to libcurl.
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
    };

    ApiResponse perform_once(const Call& c, const std::string& token) {
        global_init_once();
        // A watch gets a handle of its own that is not pooled: it drives it through a multi
        // handle so that a stop is seen when wake_watches() wakes it, which curl_easy_perform
        // cannot promise.
        CURL* h = c.streaming() ? curl_easy_init() : acquire();
        if (!h)
            return fail(c.method, c.path, "curl_easy_init failed");
        Releaser releaser{this, h, !c.streaming()};

        Transfer t;
        t.h = h;
        t.limit = std::min(c.body_limit, max_body());
        t.streaming = c.streaming();
        t.watch.on_line = c.on_line;
        t.watch.stop = c.stop;
        t.last_byte = std::chrono::steady_clock::now();
        char errbuf[CURL_ERROR_SIZE] = {};
        std::string url = ep_.server + c.path;
        CurlSlist headers;
        if (!add_headers(c.method, token, &headers))
            return fail(c.method, c.path, "out of memory");
        // The CA and client certificate files are read here (Credentials::tls), never by
        // libcurl: it would open a FIFO and wait for ever, or read a huge file whole, and no
        // timeout of ours would stop it; and a rotated CA is used from the next call on.
        Credentials::Tls pem;
        std::string unread;
        if (!creds_.tls(&pem, &unread))
            return fail(c.method, c.path, unread);

        CurlOptions o{h};
        set_endpoint(o, url, user_agent_, headers, errbuf);
        set_tls(o, pem);
        set_transfer(o, c, &t);
        set_method(o, c);
        if (!o.ok)
            return fail(c.method, c.path, "libcurl refused an option (a build without HTTPS?)");

        WatchEnd end;
        CURLcode rc = c.streaming() ? drive_watch(h, &t, c.idle, &end) : curl_easy_perform(h);
        return outcome(c, &t, rc, end, errbuf);
    }

    // The answer of a finished transfer, or what went wrong with it.
    ApiResponse outcome(const Call& c, Transfer* t, CURLcode rc, WatchEnd end,
                        const char* errbuf) {
        ApiResponse r;
        long status = 0;
        curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
        if (t->watch.caller_ended || end.stopped) {
            r.status = status;  // the caller ended it; nothing went wrong
            return r;
        }
        if (end.idle_out)
            return fail(c.method, c.path, "no data for " + std::to_string(c.idle.count()) + " ms");
        if (!t->callback_error.empty())
            return fail(c.method, c.path, t->callback_error);
        const char* what = c.streaming() && t->watch.lines ? "a watch event" : "the response body";
        if (t->too_big || rc == CURLE_FILESIZE_EXCEEDED)
            return fail(c.method, c.path, std::string(what) + " is over " +
                                              std::to_string(t->limit) + " bytes; refused");
        if (t->over_held)
            return fail(c.method, c.path,
                        std::string(what) + " would take the bodies the API client holds over " +
                            std::to_string(max_held()) + " bytes; refused (try again)");
        if (rc != CURLE_OK) {
            std::string why = curl_easy_strerror(rc);
            if (errbuf[0])
                why += std::string(" (") + errbuf + ")";
            return fail(c.method, c.path, why);
        }
        if (c.streaming() && !t->watch.pending.empty())
            spdlog::debug("GET {}: the watch ended inside an event; {} bytes dropped", c.path,
                          t->watch.pending.size());
        r.status = status;
        r.body = std::move(t->body);
        t->held->shrink_to(r.body.size());  // a watch's partial last line is dropped
        r.held = std::move(t->held);
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
    CURLcode drive_watch(CURL* h, Transfer* t, std::chrono::milliseconds idle, WatchEnd* end) {
        bool* stopped = &end->stopped;
        bool* idle_out = &end->idle_out;
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
            if (t->watch.stop->load()) {
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
        if (!done && !*stopped && !*idle_out && rc == CURLE_OK && t->watch.stop->load())
            *stopped = true;
        curl_multi_remove_handle(m, h);
        curl_multi_cleanup(m);
        if (rc == CURLE_ABORTED_BY_CALLBACK && t->watch.stop->load())
            *stopped = true;
        return rc;
    }

    ApiEndpoint ep_;
    Credentials creds_;
    std::string user_agent_;
    std::mutex pool_mu_;
    std::vector<CURL*> pool_;
    std::mutex watches_mu_;
    std::vector<CURLM*> watches_;  // running watches' multi handles, for wake_watches()
};

}  // namespace

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