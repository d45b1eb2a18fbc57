// How vfiod-dra-plugin proves who it is to the API server and checks the server (DESIGN §10):
// the cluster CA, and a bearer token or a client certificate, as an ApiEndpoint names them
// (kube_config.hpp). A token file is re-read whenever it changes (projected service-account
// tokens rotate) and when a 401 says the token sent is no longer good, and listeners are told
// of a rotation at once; the CA and certificate files are read for each call, by us, never by
// libcurl (which would wait on a FIFO for ever, or read a huge file whole). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kube_config.hpp"

namespace vfiod::dra {

// A token, a CA bundle or a client key is a few kilobytes; larger files are someone else's
// mistake, not ours to read whole.
constexpr size_t kMaxCredentialFile = 1 << 20;

// Reads a whole regular file of at most `limit` bytes. False and *err ("<path>: <why>").
bool read_small_file(const std::string& path, size_t limit, std::string* out, std::string* err);
// Whether `s` holds a PEM certificate.
bool looks_like_pem_cert(const std::string& s);
// `s` without leading and trailing white space.
std::string trim(const std::string& s);
// A token goes into a header line: not empty, no control characters, no spaces.
bool valid_token(const std::string& t);
// https://host[:port][/prefix] with no trailing slash, no query, nothing a header or a log
// line could be confused by. False and *why otherwise.
bool normalize_server(std::string* server, std::string* why);

class Credentials {
public:
    // The PEM one call is made with: the CA, and the client certificate and key (empty: none).
    struct Tls {
        std::string ca, cert, key;
    };

    explicit Credentials(const ApiEndpoint& ep);
    ~Credentials();
    Credentials(const Credentials&) = delete;
    Credentials& operator=(const Credentials&) = delete;

    // What can be checked before the first call: exactly one CA, and it parses as PEM; a
    // certificate with its key; a usable token, read from its file. False and *err, naming
    // the endpoint's origin.
    bool check(std::string* err);

    // Whether calls carry a bearer token.
    bool with_token() const;
    // The token to send (re-read from its file when `force` or the file changed); false and
    // *err when there is none.
    bool token(std::string* out, std::string* err, bool force = false);
    // Whether the token comes from a file (a 401 is then worth a re-read).
    bool token_from_file() const;
    // The PEM for one call; false and *err ("CA <file>: <why>") when a file cannot be read.
    bool tls(Tls* out, std::string* err) const;

    // Calls fn whenever a token other than the last one is read from the token file (see
    // KubeApi::add_token_listener); 0 when there is no token file.
    uint64_t add_token_listener(std::function<void()> fn);
    void remove_token_listener(uint64_t id);

private:
    class TokenSource;
    class TokenWatch;

    bool check_identity(std::string* err);

    ApiEndpoint ep_;
    std::unique_ptr<TokenSource> token_;
    std::unique_ptr<TokenWatch> watch_;
};

}  // namespace vfiod::dra
