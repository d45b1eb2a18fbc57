// The device plugin's test world, shared by tests/integration/test_device_plugin and
// bench/device_plugin_bench: child processes, a private bus whose activation of org.vfiod1 would
// leave a marker, and the test build of vfiod on the fake kernel.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eventually.hpp"
#include "private_bus.hpp"

extern char** environ;

namespace vfiod::test {

namespace plugin_env_detail {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

inline std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

inline void spit(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class Proc {
public:
    Proc() = default;
    Proc(std::vector<std::string> argv, const std::string& log) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        std::vector<char*> args;
        for (auto& a : argv)
            args.push_back(a.data());
        args.push_back(nullptr);
        if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0)
            pid_ = -1;
        posix_spawn_file_actions_destroy(&fa);
    }
    Proc(Proc&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
    Proc& operator=(Proc&& o) noexcept {
        stop();
        pid_ = o.pid_;
        o.pid_ = -1;
        return *this;
    }
    ~Proc() { stop(); }
    // SIGTERM and the exit status (-1 when it was not running).
    int stop(int sig = SIGTERM) {
        if (pid_ <= 0)
            return -1;
        kill(pid_, sig);
        int st = 0;
        waitpid(pid_, &st, 0);
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    // Waits for the process to exit by itself; -1 on timeout.
    int wait_exit(std::chrono::milliseconds timeout) {
        int code = -1;
        eventually([&] {
            int st = 0;
            if (pid_ <= 0 || waitpid(pid_, &st, WNOHANG) != pid_)
                return false;
            pid_ = -1;
            code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return true;
        }, timeout);
        return code;
    }
    int signal(int sig) const { return kill(pid_, sig); }
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
};

// A work directory with a private bus (DBUS_SYSTEM_BUS_ADDRESS points at it) whose service
// directory would start a marker script, not vfiod, if anything asked for org.vfiod1.
struct PluginEnv {
    std::string work, kubelet_dir;
    PrivateBus bus;

    // False when the bus did not come up.
    bool start_bus() {
        char tmpl[] = "/tmp/vfiod-dp.XXXXXX";
        work = mkdtemp(tmpl);
        fs::permissions(work, fs::perms(0755));
        kubelet_dir = work + "/device-plugins";
        fs::create_directories(kubelet_dir);
        spit(work + "/activated.sh", "#!/bin/sh\ntouch " + work + "/activated\n");
        fs::permissions(work + "/activated.sh", fs::perms(0755));
        // If anything asked the bus to start org.vfiod1, this marker appears.
        fs::create_directories(work + "/services");
        spit(work + "/services/org.vfiod1.service",
             "[D-BUS Service]\nName=org.vfiod1\nExec=" + work + "/activated.sh\n");
        if (!bus.start(work))
            return false;
        setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address().c_str(), 1);
        return true;
    }
    bool activated() const { return fs::exists(work + "/activated"); }

    // The test build of vfiod on the fake kernel, enforce mode, on SCENARIO; its tree's root.
    // `ready` bounds the coldplug binds: 256 of them take 40 s on a loaded machine (journal fsyncs).
    std::string start_fake_vfiod(Proc* vfiod, const std::string& scenario,
                                 const std::string& config,
                                 std::chrono::seconds ready = 20s) const {
        *vfiod = Proc({VFIOD_FAKE_KERNEL, "--root", scenario, "--config", config, "--verbose"},
                      work + "/vfiod.log");
        // "ready" comes once the coldplug binds have ended (the bus is served before).
        if (!eventually([&] { return slurp(work + "/vfiod.log").find(" ready: ") != std::string::npos; },
                        ready))
            return "";
        std::string log = slurp(work + "/vfiod.log");
        auto at = log.find("root=") + 5;
        return log.substr(at, log.find('\n', at) - at);
    }
};

}  // namespace plugin_env_detail

using plugin_env_detail::PluginEnv;
using plugin_env_detail::Proc;
using plugin_env_detail::slurp;
using plugin_env_detail::spit;

}  // namespace vfiod::test
