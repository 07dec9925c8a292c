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

TEST(DiffFileNames, StripsComponentsAndSkipsHunkBodies) {
  // Hunk lines that look like headers ("--- x" removed, "+++ y" added) must not be taken for files.
  std::string diff =
      "diff --git a/src/k.cpp b/src/k.cpp\n--- a/src/k.cpp\t2026-01-01\n+++ b/src/k.cpp\t2026-01-02\n"
      "@@ -1,2 +1,2 @@\n---- old\n++++ new\n keep\n"
      "--- /dev/null\n+++ b/inc/new.h\n@@ -0,0 +1 @@\n+x\n"
      "--- a/inc/old.h\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n";
  auto names = diff_file_names(diff, 1);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], "src/k.cpp");
  EXPECT_EQ(names[1], "inc/new.h");
  EXPECT_EQ(names[2], "inc/old.h");
  EXPECT_EQ(diff_file_names("--- src/k.cpp\n+++ src/k.cpp\n@@ -1 +1 @@\n-a\n+b\n", 0)[0], "src/k.cpp");
  EXPECT_EQ(diff_file_names(diff, 2)[0], "k.cpp");
}

TEST(DiffFileNames, RefusesWhatItCannotTrack) {
  auto refused = [](const std::string& diff, int strip, const std::string& why) {
    try {
      diff_file_names(diff, strip);
      ADD_FAILURE() << "accepted: " << diff;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "renames");
  refused("--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", 1, "unsafe");
  refused("--- /abs/x\n+++ /abs/x\n@@ -1 +1 @@\n-a\n+b\n", 1, "absolute");
  refused("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", 2, "fewer than -p 2");
  refused("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", 1, "twice");
  refused("hello\n", 1, "names no file");
}

TEST(PatchedTree, ReportsModifiedCreatedDeletedAndLeavesRootAlone) {
  TempDir t;
  write_file(t / "root/k.cpp", "four\n");
  write_file(t / "root/old.h", "old\n");
  write_file(t / "fix.diff",
             "--- a/k.cpp\n+++ b/k.cpp\n@@ -1 +1 @@\n-four\n+seven\n"
             "--- /dev/null\n+++ b/new.h\n@@ -0,0 +1 @@\n+new\n"
             "--- a/old.h\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n");
  std::string before = tree_digest(t.path());
  PatchedTree tree(real_disk(), t / "root", t / "fix.diff", 1);
  ASSERT_EQ(tree.changes().size(), 3u);
  EXPECT_EQ(tree.changes()[0].change, FileChange::modified);
  EXPECT_EQ(read_file(tree.changes()[0].content), "seven\n");
  EXPECT_EQ(tree.changes()[1].change, FileChange::created);
  EXPECT_EQ(tree.changes()[1].path, t / "root/new.h");
  EXPECT_EQ(tree.changes()[2].change, FileChange::deleted);
  EXPECT_EQ(tree_digest(t.path()), before);
}
