#include "core/resource_names.hpp"

#include <algorithm>

namespace vfiod {

namespace {

bool alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// The domain, prefixed with "requests." for the quota name, must be a DNS-1123 subdomain of at
// most 253 characters (lower case).
std::string domain_problem(std::string_view domain) {
    if (domain.ends_with("kubernetes.io"))  // the kubelet: any name containing "kubernetes.io/"
        return "the kubernetes.io domain is reserved for Kubernetes' own resources";
    if (domain.starts_with("requests."))
        return "a domain starting with \"requests.\" names a quota, not a resource";
    constexpr size_t kQuotaPrefix = sizeof "requests." - 1;
    if (domain.size() > 253 - kQuotaPrefix)
        return "the domain has " + std::to_string(domain.size()) + " characters; at most " +
               std::to_string(253 - kQuotaPrefix) + " (a DNS subdomain, after \"requests.\")";
    bool label_start = true;
    for (size_t i = 0; i < domain.size(); ++i) {
        char c = domain[i];
        bool lower = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        bool ends_label = i + 1 == domain.size() || domain[i + 1] == '.';
        if (c == '.' ? label_start : !(lower || (c == '-' && !label_start && !ends_label)))
            return "the domain must be a DNS subdomain: lower-case letters, digits, '-' and '.', "
                   "each dot-separated part starting and ending with a letter or digit";
        label_start = c == '.';
    }
    if (label_start)
        return "the domain must not end with '.'";
    return "";
}

}  // namespace

// The name after '/' is at most 63 letters, digits, '-', '_', '.', starting and ending with a
// letter or digit; kubernetes.io/ names are the cluster's own resources.
std::string resource_name_problem(std::string_view s) {
    auto slash = s.find('/');
    if (slash == std::string_view::npos || s.find('/', slash + 1) != std::string_view::npos)
        return "expected exactly one '/' between domain and name";
    std::string_view domain = s.substr(0, slash), name = s.substr(slash + 1);
    if (domain.empty() || name.empty())
        return "the domain and the name must not be empty";
    if (auto why = domain_problem(domain); !why.empty())
        return why;
    if (name.size() > 63)
        return "the name after '/' has " + std::to_string(name.size()) +
               " characters; at most 63";
    if (!alnum(name.front()) || !alnum(name.back()) ||
        !std::all_of(name.begin(), name.end(),
                     [](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; }))
        return "the name after '/' must be letters, digits, '.', '_' and '-', starting and "
               "ending with a letter or digit";
    return "";
}

std::string default_mdev_resource_name(std::string_view type) {
    std::string out = "vfiod.io/";
    for (char c : type)
        out += alnum(c) || c == '.' || c == '_' || c == '-' ? c : '_';
    return out;
}

std::string plugin_socket_name(std::string_view resource) {
    std::string out = "vfiod-";
    for (char c : resource)
        out += alnum(c) || c == '_' || c == '-' ? c : '_';
    return out + ".sock";
}

std::string plugin_env_name(std::string_view resource, std::string_view prefix) {
    std::string out(prefix);
    for (char c : resource) {
        if (c == '/' || c == '.')
            out += '_';
        else
            out += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
    }
    return out;
}

std::string resource_name_collision(std::string_view a, std::string_view b,
                                    std::string_view prefix) {
    if (a == b)
        return "";
    if (std::string s = plugin_socket_name(a); s == plugin_socket_name(b))
        return "both would be served on the device plugin socket " + s;
    if (std::string e = plugin_env_name(a, prefix); e == plugin_env_name(b, prefix))
        return "both would be handed to the VM in the environment variable " + e;
    return "";
}

std::string socket_path_problem(std::string_view resource, std::string_view dir) {
    std::string path = std::string(dir) + "/" + plugin_socket_name(resource);
    if (path.size() <= kMaxSocketPath)
        return "";
    return "its device plugin socket " + path + " would be " + std::to_string(path.size()) +
           " bytes long; a unix socket path holds at most " + std::to_string(kMaxSocketPath);
}

}  // namespace vfiod
