// core/toml_prescan on its own: the positions it reports are the ones the config messages print,
// and what it lets through (strings, comments, shallow keys) reaches the TOML parser untouched.
#include <gtest/gtest.h>

#include <string>

#include "core/toml_prescan.hpp"

namespace vfiod {
namespace {

std::string dotted(int components) {
    std::string key = "a";
    for (int i = 1; i < components; ++i)
        key += ".a";
    return key;
}

TEST(TomlPrescan, ShallowDocumentPasses) {
    EXPECT_FALSE(find_deep_key("[daemon]\nmode = \"enforce\"\n[[device]]\nselector = \"10de:*\"\n"));
    EXPECT_FALSE(find_deep_key(dotted(64) + " = 1\n"));
}

TEST(TomlPrescan, LongDottedKeyReportedWhereItStarts) {
    auto spot = find_deep_key("# header\n  " + dotted(65) + " = 1\n");
    ASSERT_TRUE(spot);
    EXPECT_EQ(spot->where.line, 2u);
    EXPECT_EQ(spot->where.column, 3u);
    EXPECT_EQ(spot->why, "more than 64 dotted components");
}

TEST(TomlPrescan, DotsInsideStringsAndCommentsDoNotCount) {
    std::string many_dots(500, '.');
    EXPECT_FALSE(find_deep_key("x = \"" + many_dots + "\"\n# " + many_dots + "\ny = '''" +
                               many_dots + "'''\n"));
}

TEST(TomlPrescan, SeventeenthBracketReportedInCharacters) {
    // "é" is two bytes and one column: the column counts characters, as toml++ does.
    auto spot = find_deep_key("é = " + std::string(17, '['));
    ASSERT_TRUE(spot);
    EXPECT_EQ(spot->where.line, 1u);
    EXPECT_EQ(spot->where.column, 21u);
    EXPECT_EQ(spot->why, "more than 16 levels of nested tables and arrays");
}

}  // namespace
}  // namespace vfiod
