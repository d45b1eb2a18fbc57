// printable(), the UTF-8 helpers and BoundedWarnings: the one place host and user text is made
// safe for a terminal, a log line or D-Bus (issue 10: forged log lines, invalid UTF-8 on the bus).
#include "core/strings.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace vfiod;
using ::testing::ElementsAre;

TEST(Printable, EscapesControlsQuotesAndNonUtf8) {
    EXPECT_EQ(printable("/mnt/a\nFAKE\x1b[2Jb c"), "/mnt/a\\x0aFAKE\\x1b[2Jb c");
    EXPECT_EQ(printable("evil\xff"), "evil\\xff");
    EXPECT_EQ(printable("a\"b\\c\x7f"), "a\\\"b\\\\c\\x7f");
    // A lone continuation byte, an overlong '/', a surrogate: not UTF-8, so escaped byte by byte.
    EXPECT_EQ(printable("\x80\xc0\xaf\xed\xa0\x80"), "\\x80\\xc0\\xaf\\xed\\xa0\\x80");
}

TEST(Printable, KeepsValidUtf8ButNotTerminalControls) {
    EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    // U+009B is CSI on a terminal; U+202E reverses what follows (Trojan Source).
    EXPECT_EQ(printable("a\xc2\x9b" "2Jb"), "a\\u009b2Jb");
    EXPECT_EQ(printable("x\xe2\x80\xaey"), "x\\u202ey");
}

TEST(Printable, CutsAtACharacterBoundary) {
    EXPECT_EQ(printable("abcdef", 4), "abcd...");
    // The euro sign (3 bytes) would straddle the cut at 4: it is left out whole.
    EXPECT_EQ(printable("ab\xe2\x82\xac", 4), "ab...");
    EXPECT_TRUE(valid_utf8(printable(std::string(100, '\xe2'), 10)));
    EXPECT_EQ(printable("abcd", 4), "abcd");
}

TEST(Utf8, SafeReplacesOnlyWhatIsInvalid) {
    EXPECT_TRUE(valid_utf8("caf\xc3\xa9"));
    EXPECT_FALSE(valid_utf8("evil\xff"));
    EXPECT_FALSE(valid_utf8("\xe2\x82"));  // truncated
    EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
    EXPECT_EQ(utf8_safe("evil\xff"), "evil\xef\xbf\xbd");
    EXPECT_EQ(utf8_safe("caf\xc3\xa9\n"), "caf\xc3\xa9\n");
    EXPECT_EQ(utf8_safe("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");
    for (int b = 0; b < 256; ++b)
        EXPECT_TRUE(valid_utf8(utf8_safe(std::string(1, static_cast<char>(b)) + "\xe2\x82")));
}

TEST(BoundedWarnings, KeepsTheFirstAndCountsTheRest) {
    std::vector<std::string> out{"earlier"};
    {
        BoundedWarnings w(&out, "junk entries skipped", 2);
        for (int i = 0; i < 100000; ++i)
            w.add("junk " + std::to_string(i));
    }
    EXPECT_THAT(out, ElementsAre("earlier", "junk 0", "junk 1", "... and 99998 more junk entries skipped"));
    std::vector<std::string> few;
    {
        BoundedWarnings w(&few, "x", 2);
        w.add("one");
        w.finish();
        w.finish();
    }
    EXPECT_THAT(few, ElementsAre("one"));
}
