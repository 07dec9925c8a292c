#include "overlay/python/sitecustomize.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(Sitecustomize, EmbeddedTextIsTheShippedSource) {
  EXPECT_EQ(sitecustomize_text(), read_file(source_dir() / "share/overlay/sitecustomize.py"));
}

TEST(Sitecustomize, WrittenOnlyWhenDifferent) {
  TempDir t;
  write_file(t / "_overlay_manifest.json", "{\"modules\": []}");
  EXPECT_TRUE(ensure_sitecustomize(real_disk(), t.path()).written);
  EXPECT_FALSE(ensure_sitecustomize(real_disk(), t.path()).written);
  EXPECT_EQ(classify_sitecustomize(real_disk(), t.path()), SitecustomizeKind::current);
  EXPECT_EQ(read_file(t / "_overlay_manifest.json"), "{\"modules\": []}");
}

TEST(Sitecustomize, OneSomeoneWroteIsKeptUnlessForced) {
  TempDir t;
  write_file(t / "sitecustomize.py", "# mine\n");
  SitecustomizeOutcome o = ensure_sitecustomize(real_disk(), t.path());
  EXPECT_EQ(o.before, SitecustomizeKind::foreign);
  EXPECT_TRUE(o.kept_foreign());
  EXPECT_EQ(read_file(t / "sitecustomize.py"), "# mine\n");
  // Our text with one byte edited is someone's edit, not ours.
  write_file(t / "sitecustomize.py", sitecustomize_text() + "\n");
  EXPECT_TRUE(ensure_sitecustomize(real_disk(), t.path()).kept_foreign());
  EXPECT_TRUE(ensure_sitecustomize(real_disk(), t.path(), Replace::always).written);
  EXPECT_EQ(read_file(t / "sitecustomize.py"), sitecustomize_text());
}

TEST(Sitecustomize, EveryKnownGeneratorsTextIsRegenerated) {
  // Each upstream version writes its text into a fresh overlay; that text is recognised as theirs.
  fs::path up = shared_reference();
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream");
  for (fs::path tool :
       {up / "overlay_setup.py", up / "upstream/overlay_setup.v2.py", up / "upstream/overlay_setup.v3.py",
        up / "upstream/overlay_setup.v7.py", up / "upstream/overlay_setup.v8-fork.py"}) {
    SCOPED_TRACE(tool.string());
    TempDir t;
    Cmd c = run({"python3", tool.string(), "add-rebind", "--overlay", (t / "ov").string(), "--target", "a:b",
                 "--impl-module", "c", "--impl-attr", "d"});
    ASSERT_EQ(c.rc, 0) << c.err;
    EXPECT_NE(sitecustomize_generator(read_file(t / "ov/sitecustomize.py")), "");
    EXPECT_EQ(classify_sitecustomize(real_disk(), t / "ov"), SitecustomizeKind::generated);
    EXPECT_TRUE(ensure_sitecustomize(real_disk(), t / "ov").written);
    EXPECT_EQ(read_file(t / "ov/sitecustomize.py"), sitecustomize_text());
  }
}

TEST(Sitecustomize, CompilesUnderPython) {
  TempDir t;
  write_file(t / "s.py", sitecustomize_text());
  Cmd c = run({"python3", "-m", "py_compile", (t / "s.py").string()});
  EXPECT_EQ(c.rc, 0) << c.err;
}
