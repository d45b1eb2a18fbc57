// Where vfiod-dra-plugin finds the API server and its credentials (DESIGN §10): a kubeconfig
// (yaml-cpp), the pod's service account, or --api-server/--token-file/--ca-file (main.cpp).
// What is named here is checked at start, naming the file and what is wrong with it; using the
// credentials is credentials.hpp's, the calls kube_api.hpp's.
#pragma once

#include <string>

namespace vfiod::dra {

// Where the API server is and how to prove who we are. Exactly one of ca_file / ca_data, and
// either a token (token_file or token) or a client certificate (cert + key, file or data).
struct ApiEndpoint {
    std::string server;      // "https://10.96.0.1:443", no trailing slash
    std::string ca_file;     // PEM bundle
    std::string ca_data;     // PEM, as kubeconfig's certificate-authority-data decodes
    std::string token_file;  // re-read when its mtime, size or inode changes
    std::string token;       // a literal token (kubeconfig "token")
    std::string client_cert_file, client_key_file;
    std::string client_cert_data, client_key_data;  // PEM
    std::string origin;      // where this came from, for errors ("kubeconfig /etc/k.yaml")
};

// A kubeconfig (YAML): the current context's cluster and user. Token, token file or client
// certificate (file or data) auth; exec and auth-provider users, insecure-skip-tls-verify and
// plain http are refused. Relative file names are taken from the kubeconfig's directory. False
// and *err (naming the file and what is wrong: "kubeconfig /k.yaml: user 'admin' uses exec
// credentials, which vfiod-dra-plugin does not run") on any problem.
bool load_kubeconfig(const std::string& path, ApiEndpoint* out, std::string* err);
// Inside a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6 host in
// brackets), the token and ca.crt of /var/run/secrets/kubernetes.io/serviceaccount. False and
// *err when the variables or files are missing.
bool in_cluster_endpoint(ApiEndpoint* out, std::string* err);
// The same with the service-account directory given (tests).
bool in_cluster_endpoint(const std::string& sa_dir, ApiEndpoint* out, std::string* err);

}  // namespace vfiod::dra
