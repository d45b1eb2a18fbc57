// What code running in the test's own process logs through spdlog's default logger (a Daemon on a
// thread of the test, say), kept line by line while a LogCapture lives. A line is a fact: that
// something happened, and in which order. Make it before the code under test starts logging,
// and let that code stop before it goes: spdlog's sink list is not guarded against a logger in
// use.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace vfiod::test {

class LogCapture {
public:
    LogCapture() : sink_(std::make_shared<Sink>()) {
        spdlog::default_logger()->sinks().push_back(sink_);
    }
    ~LogCapture() {
        auto& sinks = spdlog::default_logger()->sinks();
        sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    }
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    // The messages so far, without time or level.
    std::vector<std::string> lines() const { return sink_->lines(); }
    // Where the first message containing `needle` is, from message `from` on, or nullopt.
    std::optional<size_t> first(const std::string& needle, size_t from = 0) const {
        auto all = lines();
        for (size_t i = from; i < all.size(); ++i)
            if (all[i].find(needle) != std::string::npos)
                return i;
        return std::nullopt;
    }

private:
    class Sink : public spdlog::sinks::base_sink<std::mutex> {
    public:
        std::vector<std::string> lines() const {
            std::lock_guard l(copy_);
            return lines_;
        }

    protected:
        void sink_it_(const spdlog::details::log_msg& msg) override {
            std::lock_guard l(copy_);
            lines_.emplace_back(msg.payload.data(), msg.payload.size());
        }
        void flush_() override {}

    private:
        mutable std::mutex copy_;  // base_sink's own mutex is not the readers'
        std::vector<std::string> lines_;
    };

    std::shared_ptr<Sink> sink_;
};

}  // namespace vfiod::test
