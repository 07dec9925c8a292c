#include "overlay/sitecustomize.hpp"

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
  EXPECT_TRUE(ensure_sitecustomize(real_disk(), t.path()));
  EXPECT_FALSE(ensure_sitecustomize(real_disk(), t.path()));
  write_file(t / "sitecustomize.py", "# stale\n");
  EXPECT_TRUE(ensure_sitecustomize(real_disk(), t.path()));
  EXPECT_EQ(read_file(t / "sitecustomize.py"), sitecustomize_text());
  EXPECT_EQ(read_file(t / "_overlay_manifest.json"), "{\"modules\": []}");
}

TEST(Sitecustomize, CompilesUnderPython) {
  TempDir t;
  write_file(t / "s.py", sitecustomize_text());
  Cmd c = run({"python3", "-m", "py_compile", (t / "s.py").string()});
  EXPECT_EQ(c.rc, 0) << c.err;
}
