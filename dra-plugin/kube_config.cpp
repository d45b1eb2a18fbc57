#include "kube_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <utility>

#include "core/strings.hpp"
#include "credentials.hpp"

namespace vfiod::dra {

namespace {

// A kubeconfig with embedded certificates is a few tens of kilobytes.
constexpr size_t kMaxKubeconfig = 4 << 20;

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
    static std::string prefix(const std::string& where) {
        return where.empty() ? "" : where + ": ";
    }

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

}  // namespace vfiod::dra
