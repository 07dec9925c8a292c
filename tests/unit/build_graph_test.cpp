// The one reader of a build's graph, on Ninja's own words and on a real Ninja build.
#include "overlay/build_graph.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(BuildGraph, ParsesNinjasQueryWithEachKindOfInput) {
  NinjaNode n =
      parse_ninja_query("lib.so:\n  input: link\n    a.o\n    | dep.so\n    || gen\n  outputs:\n    app\n    all\n");
  EXPECT_TRUE(n.known);
  EXPECT_EQ(n.rule, "link");
  ASSERT_EQ(n.inputs.size(), 3u);
  EXPECT_EQ(n.inputs[0], std::make_pair(std::string("a.o"), InputKind::explicit_));
  EXPECT_EQ(n.inputs[1], std::make_pair(std::string("dep.so"), InputKind::implicit));
  EXPECT_EQ(n.inputs[2], std::make_pair(std::string("gen"), InputKind::order_only));
  EXPECT_EQ(n.outputs, (std::vector<std::string>{"app", "all"}));
}

TEST(BuildGraph, ParsesNinjasDepsLog) {
  auto d = parse_ninja_deps(
      "k.o: #deps 2, deps mtime 1 (VALID)\n    ../k.c\n    ../k.h\n\nm.o: #deps 1, deps mtime 2 (STALE)\n    "
      "../m.c\n\n");
  EXPECT_EQ(d["k.o"], (std::vector<std::string>{"../k.c", "../k.h"}));
  EXPECT_EQ(d["m.o"], (std::vector<std::string>{"../m.c"}));
}

TEST(BuildGraph, AsksARealNinjaBuild) {
  if (!have({"ninja", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "needs ninja and cc";
  TempDir t;
  write_file(t / "k.h", "#define K 1\n");
  write_file(t / "k.c", "#include \"k.h\"\nint k(void) { return K; }\n");
  write_file(t / "build.ninja",
             "rule cc\n  command = cc -MD -MF $out.d -c $in -o $out\n  deps = gcc\n  depfile = $out.d\n"
             "rule ar\n  command = ar rcs $out $in\n"
             "build k.o: cc k.c\nbuild libk.a: ar k.o || k.h\n");
  ASSERT_EQ(run({"ninja", "-C", t.path().string()}).rc, 0);
  NinjaNode lib = ninja_query(t.path(), "libk.a");
  ASSERT_TRUE(lib.known);
  EXPECT_EQ(lib.rule, "ar");
  EXPECT_EQ(lib.inputs, (std::vector<std::pair<std::string, InputKind>>{{"k.o", InputKind::explicit_},
                                                                        {"k.h", InputKind::order_only}}));
  EXPECT_FALSE(ninja_query(t.path(), "nothing.o").known);
  auto deps = ninja_deps(t.path());
  ASSERT_EQ(deps.count("k.o"), 1u);
  EXPECT_NE(std::find(deps["k.o"].begin(), deps["k.o"].end(), "k.h"), deps["k.o"].end());
}

TEST(BuildGraph, ReadsACompileDatabaseAndNothingElse) {
  TempDir t;
  write_file(t / "cc.json", "[{\"file\": \"a.c\", \"directory\": \"/b\"}, {\"file\": 3}, \"x\"]");
  auto db = compile_database(real_disk(), t / "cc.json");
  ASSERT_EQ(db.size(), 1u);
  EXPECT_EQ(db[0].file, "a.c");
  EXPECT_EQ(db[0].directory, "/b");
  write_file(t / "bad.json", "{");
  EXPECT_TRUE(compile_database(real_disk(), t / "bad.json").empty());
  EXPECT_TRUE(compile_database(real_disk(), t / "missing.json").empty());
}
