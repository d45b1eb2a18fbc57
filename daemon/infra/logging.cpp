#include "infra/logging.hpp"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>

namespace vfiod {

void setup_logging(bool verbose, const char* ident) {
    bool under_systemd = std::getenv("JOURNAL_STREAM") || std::getenv("INVOCATION_ID");
    std::shared_ptr<spdlog::logger> logger;
    if (under_systemd) {
        // The journal adds its own timestamp and priority; the message is all we send.
        auto sink = std::make_shared<spdlog::sinks::systemd_sink_mt>(ident);
        logger = std::make_shared<spdlog::logger>(ident, sink);
        logger->set_pattern("%v");
    } else {
        logger = std::make_shared<spdlog::logger>(
            ident, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
        logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
    }
    logger->set_level(verbose ? spdlog::level::debug : spdlog::level::info);
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
}

}  // namespace vfiod
