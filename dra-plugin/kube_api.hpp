// The API server as vfiod-dra-plugin reaches it (DESIGN §10): HTTPS REST with JSON, through
// Debian's libcurl (OpenSSL), TLS verified against the cluster CA, a bearer token re-read from
// its file whenever the file changes (projected service-account tokens rotate) or a client
// certificate (credentials.hpp). Where it is comes from a kubeconfig, from the pod's service
// account, or from --api-server/--token-file/--ca-file (kube_config.hpp). No JSON knowledge
// here: callers parse the bodies.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kube_config.hpp"

namespace vfiod::dra {

struct ApiResponse {
    long status = 0;    // the HTTP status; 0 when no answer came (connect failed, timed out,
                        // dropped, TLS refused, over a limit below)
    std::string body;   // at most the call's max_body bytes; a longer body is an error (status 0)
    std::string error;  // status 0: what went wrong, for a log line
    // The body's share of kMaxBodiesHeld, given back when the last copy of the answer is gone.
    std::shared_ptr<const void> held{};
    bool ok() const { return status >= 200 && status < 300; }
    // Worth trying again after a backoff: no answer, 429, or a 5xx.
    bool retryable() const { return status == 0 || status == 429 || status >= 500; }
    // One line for a log: "HTTP 403: <the Status message>" or the transport error.
    std::string describe() const;
};

// Memory a hostile or broken server can make the client hold, bounded twice, both counted as
// the body streams in (never after it was read whole): one body (or one watch event) is cut off
// past its call's max_body, at most kMaxBody, and the bodies of all calls of the process at once
// (received, and answers not yet dropped by their callers) past kMaxBodiesHeld, which fails the
// call that would go over it (status 0, retryable). DESIGN §10.
constexpr size_t kMaxBody = 64 << 20;
constexpr size_t kMaxBodiesHeld = 128 << 20;
// Tests only: smaller limits in place of kMaxBody and kMaxBodiesHeld for the whole process (0:
// the constant again), and the bytes held now.
void set_max_body_for_tests(size_t limit);
void set_max_bodies_held_for_tests(size_t limit);
size_t bodies_held_for_tests();

// One API server. Thread-safe: any thread may call, concurrently (each call uses its own
// curl handle, or a per-thread one). Every call is bounded in time; none throws.
class KubeApi {
public:
    virtual ~KubeApi() = default;
    // method: GET, POST, PUT, PATCH, DELETE. path: from the root, with its query
    // ("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=..."). body: JSON or empty; a
    // PATCH body is a JSON merge patch (application/merge-patch+json). A 401 re-reads the token
    // file and tries once more when the token changed.
    // The answer's body is refused as soon as it passes max_body (kMaxBody when larger): the
    // caller's own bound for what it asks, 4 MiB for a ResourceClaim, say.
    virtual ApiResponse request(const std::string& method, const std::string& path,
                                const std::string& body, std::chrono::milliseconds timeout,
                                size_t max_body) = 0;
    ApiResponse request(const std::string& method, const std::string& path,
                        const std::string& body, std::chrono::milliseconds timeout) {
        return request(method, path, body, timeout, kMaxBody);
    }
    // A watch: GET `path` (which carries watch=true) as a stream; each complete line (one watch
    // event, JSON) goes to on_line as it arrives. Returns when the server ends the stream, the
    // connection drops, no byte arrived for `idle` (the server's bookmarks or the timeoutSeconds
    // the caller asked for end a healthy watch first), on_line returns false, or `stop` turns
    // true (seen at once when wake_watches() follows, within a second otherwise: an idle watch
    // sleeps until a byte, its idle limit or that second). A line over kMaxBody ends it with an
    // error.
    // The answer: a stream that the server ended, or `stop` or on_line ended, has the HTTP
    // status (200) and no error; a non-2xx answer (410, 403...) its status and Status body, no
    // line delivered; a drop, an idle timeout or an over-long line status 0 and an error. A
    // partial last line is never delivered.
    virtual ApiResponse watch(const std::string& path,
                              const std::function<bool(const std::string& line)>& on_line,
                              const std::atomic<bool>& stop,
                              std::chrono::milliseconds idle) = 0;
    // Wakes every watch of this client now running to look at its `stop`; from any thread.
    virtual void wake_watches() {}
    // Calls fn whenever a token other than the last one is read from the token file, on
    // whichever thread read it: a rotation by the kubelet at once (the file's directory is
    // watched), a change in place at the next request. An id for remove_token_listener(); 0
    // when there is no token file. fn must neither block nor call into this client.
    virtual uint64_t add_token_listener(std::function<void()> /*fn*/) { return 0; }
    // Once it returns, the listener is neither called nor running.
    virtual void remove_token_listener(uint64_t /*id*/) {}
};

// The libcurl implementation. Null and *err when the endpoint cannot be used (unreadable CA).
std::unique_ptr<KubeApi> make_curl_api(const ApiEndpoint& endpoint, std::string* err);

// Percent-encodes a query value ("spec.nodeName=n1,spec.driver=vfio.vfiod.io").
std::string query_escape(const std::string& s);

}  // namespace vfiod::dra
