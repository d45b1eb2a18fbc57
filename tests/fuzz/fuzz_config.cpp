// The config loader and validator (DESIGN §3) on any bytes: never throws or crashes, accepts a
// config only when there is no error, reports every error as FILE:LINE:COLUMN without raw control
// characters (they end up in the journal), and what it accepts is within the documented limits.
#include <cctype>
#include <string>

#include "fuzz_check.hpp"
#include "io/config_loader.hpp"

using namespace vfiod;
using vfiod::fuzz::printable;

namespace {

const std::string kName = "fuzz.toml";

// "fuzz.toml:LINE:COLUMN: message" with a non-empty message.
bool located(const std::string& m) {
    if (m.rfind(kName + ':', 0) != 0)
        return false;
    size_t i = kName.size() + 1;
    for (int field = 0; field < 2; ++field) {
        size_t start = i;
        while (i < m.size() && std::isdigit(static_cast<unsigned char>(m[i])))
            ++i;
        if (i == start || i >= m.size() || m[i] != ':')
            return false;
        ++i;
    }
    return m.compare(i, 1, " ") == 0 && m.size() > i + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    ConfigResult r = parse_config(in, kName);

    FUZZ_CHECK(r.config.has_value() == r.errors.empty());
    for (const auto& e : r.errors) {
        FUZZ_CHECK(located(e));
        FUZZ_CHECK(printable(e));
    }
    for (const auto& w : r.warnings)
        FUZZ_CHECK(printable(w));

    if (r.config) {
        const Config& c = *r.config;
        FUZZ_CHECK(c.write_timeout >= 1 && c.write_timeout <= 3600);
        FUZZ_CHECK(c.files.size() == 1 && c.files[0] == kName);
        for (const auto& d : c.devices) {
            FUZZ_CHECK(d.selector || d.address);
            // The driver name is written to driver_override: never a host driver, never a path.
            FUZZ_CHECK(d.driver.find("vfio") != std::string::npos);
            FUZZ_CHECK(d.driver.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") ==
                       std::string::npos);
            FUZZ_CHECK(d.resource_name.empty() ||
                       d.resource_name.find('/') == d.resource_name.rfind('/'));
            if (d.address)
                FUZZ_CHECK(PciAddress::parse(d.address->str()) == d.address);
            FUZZ_CHECK(d.origin.file == kName && d.origin.line >= 1);
        }
        for (const auto& p : c.protects)
            FUZZ_CHECK(p.selector || p.address);
    }

    // Sizes a fuzzer cannot reach within its input length (issue 10): the input repeated to
    // 4 KiB turns "a." into a key of 2,000 components (toml++ recursed until the stack
    // overflowed) and one [[device]] entry into a hundred overlapping ones (one warning per
    // pair). The verdict keeps its form, and the warnings stay bounded.
    if (size > 0 && size <= 512) {
        std::string big;
        while (big.size() < 4096)
            big.append(in);
        ConfigResult b = parse_config(big, kName);
        FUZZ_CHECK(b.config.has_value() == b.errors.empty());
        for (const auto& e : b.errors)
            FUZZ_CHECK(located(e) && printable(e));
        for (const auto& w : b.warnings)
            FUZZ_CHECK(printable(w));
        FUZZ_CHECK(b.warnings.size() <= 21);
    }

    // Same bytes, same verdict: the daemon compares configs across reloads.
    ConfigResult again = parse_config(in, kName);
    FUZZ_CHECK(again.errors == r.errors && again.warnings == r.warnings);
    FUZZ_CHECK(again.config.has_value() == r.config.has_value());
    if (r.config)
        FUZZ_CHECK(*again.config == *r.config);
    return 0;
}
