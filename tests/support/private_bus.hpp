// The C++ tests' private dbus-daemon (the shell tests have start_private_bus in
// tests/integration/lib.sh): a bus on DIR/bus where anyone may own any name, with DIR/services
// as its activation directory, so a test can prove nothing activates org.vfiod1 by putting a
// marker-writing .service file there.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "eventually.hpp"
#include "unix_socket.hpp"

namespace vfiod::test {

class PrivateBus {
public:
    PrivateBus() = default;
    // Starts at once; up() says whether it came up.
    explicit PrivateBus(const std::string& dir) { start(dir); }
    PrivateBus(const PrivateBus&) = delete;
    PrivateBus& operator=(const PrivateBus&) = delete;
    ~PrivateBus() { stop(); }

    // Starts dbus-daemon on DIR/bus and waits (5 s at most) until it accepts connections.
    bool start(const std::string& dir) {
        stop();
        socket_ = dir + "/bus";
        std::filesystem::create_directories(dir + "/services");
        std::ofstream(dir + "/bus.conf") << R"(<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=)" << socket_ << R"(</listen>
  <auth>EXTERNAL</auth>
  <servicedir>)" << dir << R"(/services</servicedir>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
)";
        std::string config = "--config-file=" + dir + "/bus.conf";
        std::string log = dir + "/bus.log";
        pid_ = fork();
        if (pid_ == 0) {
            // Dies with the test, even when the test dies of an abort; and a test that blocks
            // its loop's signals must not hand that mask to the bus.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, nullptr);
            if (FILE* f = std::fopen(log.c_str(), "a")) {
                dup2(fileno(f), 1);
                dup2(fileno(f), 2);
            }
            execlp("dbus-daemon", "dbus-daemon", config.c_str(), "--nofork", "--nopidfile",
                   static_cast<char*>(nullptr));
            _exit(127);
        }
        eventually([&] { return up(); }, std::chrono::seconds(5));
        return up();
    }
    void stop() {
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, nullptr, 0);
        }
        pid_ = -1;
    }
    bool up() const { return pid_ > 0 && accepts_connections(socket_); }
    std::string address() const { return "unix:path=" + socket_; }

private:
    std::string socket_;
    pid_t pid_ = -1;
};

}  // namespace vfiod::test
