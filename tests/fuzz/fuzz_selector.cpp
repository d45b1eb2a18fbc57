// Selector::parse reads "vvvv:dddd" / "vvvv:*" from the config: what it accepts must print back
// as the same selector (case aside), and a rejection must explain itself.
#include <cctype>
#include <string>

#include "core/config.hpp"
#include "fuzz_check.hpp"

using vfiod::Selector;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    std::string err;
    if (auto s = Selector::parse(in, &err)) {
        std::string lower(in);
        for (char& c : lower)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        FUZZ_CHECK(s->str() == lower);
        auto back = Selector::parse(s->str());
        FUZZ_CHECK(back && *back == *s);
        FUZZ_CHECK(s->matches(s->vendor, s->device.value_or(0)));
        if (s->device)
            FUZZ_CHECK(!s->matches(s->vendor, static_cast<uint16_t>(*s->device + 1)));
    } else {
        FUZZ_CHECK(!err.empty());
        FUZZ_CHECK(vfiod::fuzz::printable(err));
    }
    return 0;
}
