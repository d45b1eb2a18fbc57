// Starts tests/support/fake_apiserver.py (the fake Kubernetes API server of DESIGN §10's tests)
// for a gtest test and talks to its /_fake/ control endpoints through the plugin's own libcurl
// client. The contract is in the script's docstring and the common brief: HTTPS on 127.0.0.1, a
// test CA in DIR/ca.crt, the bearer token in DIR/token, DIR/kubeconfig, DIR/writes.jsonl.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "eventually.hpp"
#include "kube_api.hpp"

namespace vfiod::test {

// A projected service-account token laid out as the kubelet keeps it: DIR/token is a link to
// ..data/token, ..data a link to the timestamped directory of the current version. A rotation
// fills a new timestamped directory, renames a new link over ..data (rename(2) replaces it
// atomically) and deletes the old directory.
class ProjectedToken {
public:
    explicit ProjectedToken(std::string dir) : dir_(std::move(dir)) {
        std::filesystem::create_directories(dir_);
    }
    std::string path() const { return dir_ + "/token"; }
    std::string dir() const { return dir_; }
    void write(const std::string& token, const std::string& stamp) {
        namespace fs = std::filesystem;
        fs::create_directory(dir_ + "/" + stamp);
        std::ofstream(dir_ + "/" + stamp + "/token") << token;
        fs::create_symlink(stamp, dir_ + "/..data_tmp");
        fs::rename(dir_ + "/..data_tmp", dir_ + "/..data");
        if (!fs::is_symlink(path()))
            fs::create_symlink("..data/token", path());
        if (!current_.empty())
            fs::remove_all(dir_ + "/" + current_);
        current_ = stamp;
    }

private:
    std::string dir_, current_;
};

class FakeApiServer {
public:
    FakeApiServer() = default;
    FakeApiServer(const FakeApiServer&) = delete;
    FakeApiServer& operator=(const FakeApiServer&) = delete;
    ~FakeApiServer() { stop(); }

#ifdef VFIOD_FAKE_APISERVER
    ::testing::AssertionResult start(const std::string& dir,
                                     const std::vector<std::string>& extra_args = {}) {
        return start_script(VFIOD_FAKE_APISERVER, dir, extra_args);
    }
#endif

    // Spawns `python3 script --dir DIR [extra_args]` and waits (20 s at most) for DIR/server.json.
    // A failure carries the server's stderr (DIR/stderr.log).
    ::testing::AssertionResult start_script(const std::string& script, const std::string& dir,
                                            const std::vector<std::string>& extra_args = {}) {
        stop();
        script_ = script;
        args_ = extra_args;
        dir_ = std::filesystem::absolute(dir).string();
        std::filesystem::create_directories(dir_);
        std::filesystem::remove(dir_ + "/server.json");
        // Everything the child needs is built before fork: a test may have threads.
        // Debian's python3 when it is there: a version manager's shim on PATH costs seconds.
        const std::string python =
            access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
        std::vector<std::string> args = {python, script, "--dir", dir_};
        args.insert(args.end(), extra_args.begin(), extra_args.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        const std::string log = dir_ + "/stderr.log";
        pid_ = fork();
        if (pid_ < 0) return ::testing::AssertionFailure() << "fork: " << strerror(errno);
        if (pid_ == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, nullptr);
            int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execvp(argv[0], argv.data());
            _exit(127);
        }
        int status = 0;
        bool exited = false;
        bool up = eventually([&] {
            exited = waitpid(pid_, &status, WNOHANG) == pid_;
            return exited || read_server_json();
        }, std::chrono::seconds(20));
        if (exited) {
            pid_ = -1;
            return ::testing::AssertionFailure()
                   << "fake API server " << script << " "
                   << (WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                         : "died of signal " + std::to_string(WTERMSIG(status)))
                   << " before writing " << dir_ << "/server.json; stderr:\n" << stderr_log();
        }
        if (up) return ::testing::AssertionSuccess();
        stop();
        return ::testing::AssertionFailure() << "fake API server " << script << " wrote no "
                                             << dir_ << "/server.json within 20 s; stderr:\n"
                                             << stderr_log();
    }

    // The API server goes away and comes back (an upgrade, a crash): stopped, then started
    // again with --restart: same URL, CA, token, objects and write log; open watches end, and
    // a watch from an earlier resourceVersion gets 410. Meanwhile connections are refused.
    ::testing::AssertionResult restart() {
        auto args = args_;
        stop();
        args.push_back("--restart");
        auto r = start_script(script_, dir_, args);
        args_.erase(std::remove(args_.begin(), args_.end(), "--restart"), args_.end());
        return r;
    }

    // SIGTERM and reap; the server ends at once (its hung requests and watches are dropped).
    void stop() {
        api_.reset();
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, nullptr, 0);
        }
        pid_ = -1;
    }

    const std::string& url() const { return url_; }          // https://127.0.0.1:PORT
    const std::string& ca_file() const { return ca_file_; }
    const std::string& token_file() const { return token_file_; }
    const std::string& kubeconfig() const { return kubeconfig_; }
    const std::string& dir() const { return dir_; }
    pid_t pid() const { return pid_; }
    vfiod::dra::ApiEndpoint endpoint() const {
        vfiod::dra::ApiEndpoint e;
        e.server = url_;
        e.ca_file = ca_file_;
        e.token_file = token_file_;
        e.origin = "fake API server " + dir_;
        return e;
    }

    // A request with the current token, e.g. control("POST", "/_fake/faults",
    // R"({"method":"PUT","path_prefix":"/apis/","action":"500","count":2})"). Works for the
    // real API paths too. Status 0 and .error when the server could not be reached.
    vfiod::dra::ApiResponse control(const std::string& method, const std::string& path,
                                    const std::string& body = "") {
        if (!api_) {
            std::string err;
            api_ = vfiod::dra::make_curl_api(endpoint(), &err);
            if (!api_) {
                vfiod::dra::ApiResponse r;
                r.error = err;
                return r;
            }
        }
        return api_->request(method, path, body, std::chrono::seconds(10));
    }
    bool add_node(const std::string& name) {
        return control("POST", "/_fake/nodes",
                       nlohmann::json{{"metadata", {{"name", name}}}}.dump()).ok();
    }
    bool put_claim(const nlohmann::json& claim) {
        return control("POST", "/_fake/claims", claim.dump()).ok();
    }
    bool fault(const std::string& method, const std::string& path_prefix,
               const std::string& action, int count = 1) {
        return control("POST", "/_fake/faults",
                       nlohmann::json{{"method", method}, {"path_prefix", path_prefix},
                                      {"action", action}, {"count", count}}.dump()).ok();
    }

    // Every write request so far (DIR/writes.jsonl): {"seq","time","method","path","status",
    // "body" (parsed JSON, a string when it was not JSON, or null)[, "fault"]}.
    std::vector<nlohmann::json> writes() const {
        std::vector<nlohmann::json> out;
        std::ifstream in(dir_ + "/writes.jsonl");
        std::string line;
        while (std::getline(in, line)) {
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (!j.is_discarded()) out.push_back(std::move(j));
        }
        return out;
    }

    std::string stderr_log() const {
        std::ifstream in(dir_ + "/stderr.log");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

private:
    bool read_server_json() {
        std::ifstream in(dir_ + "/server.json");
        if (!in) return false;
        auto j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return false;
        url_ = j.value("url", "");
        ca_file_ = j.value("ca_file", "");
        token_file_ = j.value("token_file", "");
        kubeconfig_ = j.value("kubeconfig", "");
        return !url_.empty();
    }

    std::string script_;
    std::vector<std::string> args_;
    std::string dir_, url_, ca_file_, token_file_, kubeconfig_;
    std::unique_ptr<vfiod::dra::KubeApi> api_;
    pid_t pid_ = -1;
};

}  // namespace vfiod::test
