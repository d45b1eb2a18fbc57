#include "plugin_main.hpp"

#include <signal.h>

#include <cstdio>
#include <memory>

#include "infra/fd.hpp"
#include "infra/instance_lock.hpp"
#include "infra/logging.hpp"

namespace vfiod::plugin {

std::optional<int> parse_command_line(int argc, char** argv, const CommandLine& cl) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(cl.usage, stdout);
            return 0;
        }
        if (a == "--version") {
            std::printf("%s %s\n", cl.program, VFIOD_VERSION);
            return 0;
        }
        if (a == "--verbose") {
            *cl.verbose = true;
            continue;
        }
        std::string* target = nullptr;
        for (const auto& [flag, value] : cl.values)
            if (a == flag)
                target = value;
        if (!target) {
            cl.refuse("unknown argument '" + a + "'", true);
            return 2;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            cl.refuse(a + " needs a value", false);
            return 2;
        }
        *target = argv[++i];
    }
    return std::nullopt;
}

int run_plugin(const PluginStart& start) {
    setup_logging(start.verbose, start.program);
    sigset_t signals = signal_set({SIGTERM, SIGINT});
    block_signals(signals);
    signal(SIGPIPE, SIG_IGN);

    std::optional<std::string> lock_dir = start.prepare();
    if (!lock_dir)
        return 1;
    Fd lock;
    if (!lock_instance(start.program, *lock_dir, &lock))
        return 1;
    std::unique_ptr<sdbus::IConnection> bus = connect_system_bus();
    if (!bus)
        return 1;
    Loop loop(*bus, signals);
    return start.run(*bus, loop);
}

}  // namespace vfiod::plugin
