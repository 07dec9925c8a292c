// Ninja's logs read record by record (ninja_logs.hpp): the records of outputs dropped, everything
// else byte for byte; and the edit checked against real Ninja, which must then remake exactly
// those outputs.
#include "overlay/ninja_logs.hpp"

#include <cstdint>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

std::string word(std::uint32_t w) { return std::string(reinterpret_cast<const char*>(&w), sizeof w); }

// A `.ninja_deps` of `version`: a path record per name (padded, with Ninja's checksum ~id), then
// a deps record per (output id, dependency ids).
std::string deps_log(std::uint32_t version, const std::vector<std::string>& paths,
                     const std::vector<std::vector<std::uint32_t>>& deps) {
  std::string out = "# ninjadeps\n" + word(version);
  for (std::uint32_t id = 0; id < paths.size(); ++id) {
    std::string p = paths[id];
    p.resize((p.size() + 3) / 4 * 4, '\0');
    out += word(static_cast<std::uint32_t>(p.size() + 4)) + p + word(~id);
  }
  for (const auto& d : deps) {
    std::string rec = word(d[0]) + word(1234) + word(0);  // output id, mtime (64 bits)
    for (std::size_t i = 1; i < d.size(); ++i) rec += word(d[i]);
    out += word(static_cast<std::uint32_t>(rec.size()) | 0x80000000u) + rec;
  }
  return out;
}

}  // namespace

TEST(NinjaLogs, ABuildLogLosesEveryRecordOfAnOutputUnderEitherSpelling) {
  const fs::path log = "/b/.ninja_log";
  const std::string text =
      "# ninja log v5\n1\t2\t10\tgen.h\taa\n1\t2\t10\t/b/gen.h\taa\n3\t4\t20\tk.o\tbb\n"
      "5\t6\t30\tsub/../gen.h\tcc\nnot a record\n";
  auto edit = without_records(log, text, {"/b/gen.h"});
  ASSERT_TRUE(edit);
  EXPECT_EQ(edit->dropped, 3u);
  EXPECT_EQ(edit->bytes, "# ninja log v5\n3\t4\t20\tk.o\tbb\nnot a record\n");
  EXPECT_EQ(without_records(log, text, {"/b/other"})->bytes, text);
  EXPECT_FALSE(without_records(log, "# some log v1\n1\t2\t10\tgen.h\taa\n", {"/b/gen.h"}));
  EXPECT_FALSE(without_records("/b/other_log", text, {"/b/gen.h"}));
}

// A build dir reached through a symlink (cmake -B /link/b) names its outputs by the link in
// absolute records: each name is compared as the caller's spelling gives it.
TEST(NinjaLogs, ARecordNamedThroughASymlinkedDirectoryIsTheSameOutput) {
  const std::string text = "# ninja log v5\n1\t2\t10\t/link/b/gen.h\taa\n3\t4\t20\tk.o\tbb\n";
  Spelling real = [](const fs::path& p) {
    std::string s = p.string();
    return s.rfind("/link/", 0) == 0 ? fs::path("/real/" + s.substr(6)) : p;
  };
  EXPECT_EQ(without_records("/real/b/.ninja_log", text, {"/real/b/gen.h"})->dropped, 0u);
  auto edit = without_records("/real/b/.ninja_log", text, {"/real/b/gen.h"}, real);
  ASSERT_TRUE(edit);
  EXPECT_EQ(edit->bytes, "# ninja log v5\n3\t4\t20\tk.o\tbb\n");
}

TEST(NinjaLogs, ADepsLogLosesTheDepsRecordsOfAnOutputAndKeepsEveryPathId) {
  const fs::path log = "/b/.ninja_deps";
  std::string bytes = deps_log(4, {"a.o", "a.c", "k.h", "/b/b.o", "b.c"}, {{0, 1, 2}, {3, 4, 2}, {0, 1}});
  auto edit = without_records(log, bytes, {"/b/a.o"});
  ASSERT_TRUE(edit);
  EXPECT_EQ(edit->dropped, 2u);
  EXPECT_EQ(edit->bytes, deps_log(4, {"a.o", "a.c", "k.h", "/b/b.o", "b.c"}, {{3, 4, 2}}));
  EXPECT_EQ(without_records(log, bytes, {"/b/b.o"})->bytes,
            deps_log(4, {"a.o", "a.c", "k.h", "/b/b.o", "b.c"}, {{0, 1, 2}, {0, 1}}));
  std::string cut = bytes.substr(0, bytes.size() - 2);  // a record cut short ends the log
  EXPECT_EQ(without_records(log, cut, {"/b/a.o"})->bytes,
            deps_log(4, {"a.o", "a.c", "k.h", "/b/b.o", "b.c"}, {{3, 4, 2}}));
  EXPECT_FALSE(without_records(log, deps_log(5, {"a.o"}, {}), {"/b/a.o"})) << "a version this does not know";
  EXPECT_FALSE(without_records(log, "# ninjalog\n", {"/b/a.o"}));
}

// Real Ninja: a.o and b.o compiled with depfiles (deps = gcc). Once a.o's records are dropped
// from either log, `ninja -n` remakes a.o (and what links it) and nothing else, and b.o's
// dependencies are still known.
TEST(NinjaLogs, RealNinjaRemakesExactlyTheOutputsWhoseRecordsWent) {
  if (!have({"ninja", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "needs ninja and cc";
  TempDir t;
  const fs::path b = t.path();
  write_file(b / "k.h", "#define K 1\n");
  write_file(b / "a.c", "#include \"k.h\"\nint a(void) { return K; }\n");
  write_file(b / "b.c", "#include \"k.h\"\nint b(void) { return K; }\n");
  write_file(b / "build.ninja",
             "rule cc\n  command = cc -MD -MF $out.d -c $in -o $out\n  depfile = $out.d\n  deps = gcc\n"
             "rule ar\n  command = ar rcs $out $in\n"
             "build a.o: cc a.c\nbuild b.o: cc b.c\nbuild libk.a: ar a.o b.o\n");
  for (const char* name : {".ninja_log", ".ninja_deps"}) {
    ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
    ASSERT_NE(run({"ninja", "-C", b.string(), "-n"}).out.find("no work to do"), std::string::npos);
    auto edit = without_records(b / name, read_file(b / name), {b / "a.o"});
    ASSERT_TRUE(edit) << name;
    EXPECT_GE(edit->dropped, 1u) << name;
    write_file(b / name, edit->bytes);
    Cmd n = run({"ninja", "-C", b.string(), "-n"});
    EXPECT_NE(n.out.find("-c a.c -o a.o"), std::string::npos) << name << "\n" << n.out;
    EXPECT_EQ(n.out.find("-c b.c -o b.o"), std::string::npos) << name << "\n" << n.out;
    Cmd deps = run({"ninja", "-C", b.string(), "-t", "deps", "b.o"});
    EXPECT_NE(deps.out.find("k.h"), std::string::npos) << name << ": b.o's deps lost\n" << deps.out;
  }
}
