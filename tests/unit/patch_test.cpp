#include "overlay/patch.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(PatchedCopy, AppliesToCopyOnly) {
  TempDir t;
  write_file(t / "k.cpp", "int f() {\n  return 4;\n}\n");
  write_file(t / "fix.diff", "--- a/k.cpp\n+++ b/k.cpp\n@@ -1,3 +1,3 @@\n int f() {\n-  return 4;\n+  return 7;\n }\n");
  std::string before = tree_digest(t.path());
  fs::path dir;
  {
    PatchedCopy p(real_disk(), t / "k.cpp", t / "fix.diff");
    EXPECT_EQ(read_file(p.file()), "int f() {\n  return 7;\n}\n");
    dir = p.file().parent_path();
  }
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(tree_digest(t.path()), before);
}

TEST(PatchedCopy, NotApplyingLeavesNothing) {
  TempDir t;
  write_file(t / "k.cpp", "something else\n");
  write_file(t / "fix.diff", "--- a/k.cpp\n+++ b/k.cpp\n@@ -1,3 +1,3 @@\n int f() {\n-  return 4;\n+  return 7;\n }\n");
  std::string before = tree_digest(t.path());
  try {
    PatchedCopy p(real_disk(), t / "k.cpp", t / "fix.diff");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not apply"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tree_digest(t.path()), before);
}
