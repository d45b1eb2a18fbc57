// What the config tests share: a document must fail with one error at a place, or load clean.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/config_loader.hpp"

namespace vfiod::test {

inline std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v)
        out += "\n  " + s;
    return out;
}

// doc must fail with exactly one error, at t.toml:AT, whose message contains `what`.
inline ::testing::AssertionResult OneError(const std::string& doc, const std::string& at,
                                           const std::string& what) {
    auto r = parse_config(doc, "t.toml");
    if (r.config)
        return ::testing::AssertionFailure() << "accepted:\n" << doc;
    if (r.errors.size() != 1)
        return ::testing::AssertionFailure() << r.errors.size() << " errors:" << joined(r.errors);
    const auto& e = r.errors[0];
    if (e.rfind("t.toml:" + at + ": ", 0) != 0 || e.find(what) == std::string::npos)
        return ::testing::AssertionFailure()
               << "got    " << e << "\nwanted t.toml:" << at << ": …" << what << "…";
    return ::testing::AssertionSuccess();
}

inline Config Parsed(const std::string& doc) {
    auto r = parse_config(doc, "t.toml");
    EXPECT_TRUE(r.errors.empty()) << joined(r.errors);
    return r.config.value_or(Config{});
}

inline std::string device(const std::string& key, const std::string& value) {
    return "[[device]]\n" + key + " = " + value + "\n";
}

// doc must load, with only warnings; they are returned.
inline std::vector<std::string> Warnings(const std::string& doc) {
    auto r = parse_config(doc, "t.toml");
    EXPECT_TRUE(r.errors.empty()) << joined(r.errors);
    EXPECT_TRUE(r.config);
    return r.warnings;
}

}  // namespace vfiod::test
