#include "overlay/words.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"

using namespace overlay;
using V = std::vector<std::string>;

TEST(SplitWords, PlainWordsAndBlanks) {
  EXPECT_EQ(split_words("  cmake --build  build\t-j2 \n"), (V{"cmake", "--build", "build", "-j2"}));
  EXPECT_EQ(split_words(""), V{});
}

TEST(SplitWords, SingleQuotesKeepEverything) {
  EXPECT_EQ(split_words("touch 'a b' c;d"), (V{"touch", "a b", "c;d"}));
  EXPECT_EQ(split_words("echo '$HOME \\n \"x\"'"), (V{"echo", "$HOME \\n \"x\""}));
  EXPECT_EQ(split_words("''"), (V{""}));
}

TEST(SplitWords, DoubleQuotesEscapeOnlyFive) {
  EXPECT_EQ(split_words(R"(echo "a \"b\" \$x \\ \n")"), (V{"echo", R"(a "b" $x \ \n)"}));
  EXPECT_EQ(split_words(R"("")"), (V{""}));
}

TEST(SplitWords, BackslashOutsideQuotes) {
  EXPECT_EQ(split_words(R"(a\ b c\'d)"), (V{"a b", "c'd"}));
  EXPECT_EQ(split_words("a\\\nb"), (V{"ab"}));
}

TEST(SplitWords, AdjacentPartsJoin) { EXPECT_EQ(split_words(R"(pre'mid'"post" x)"), (V{"premidpost", "x"})); }

TEST(SplitWords, NoExpansionNoOperators) {
  EXPECT_EQ(split_words("echo $PATH * ~ && rm -rf / | x"),
            (V{"echo", "$PATH", "*", "~", "&&", "rm", "-rf", "/", "|", "x"}));
}

TEST(SplitWords, Unterminated) {
  EXPECT_THROW(split_words("echo 'abc"), Error);
  EXPECT_THROW(split_words("echo \"abc"), Error);
  EXPECT_THROW(split_words("echo abc\\"), Error);
}

TEST(JoinWords, RoundTrips) {
  V argv{"bash", "-c", "echo 'hi' && exit 3", "", "a b", "plain"};
  EXPECT_EQ(split_words(join_words(argv)), argv);
}
