#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/manifest.hpp"
#include "overlay/python/verbs.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(PythonOverlay, DottedNames) {
  EXPECT_TRUE(valid_dotted_name("a"));
  EXPECT_TRUE(valid_dotted_name("vllm.model_executor.layers._C2"));
  for (const char* bad : {"", ".a", "a.", "a..b", "1a", "a-b", "a b", "a/b", "a:b"})
    EXPECT_FALSE(valid_dotted_name(bad)) << bad;
}

TEST(PythonOverlay, LegacyModuleNames) {
  EXPECT_EQ(legacy_module_name("vllm", "ops/attn.py"), "vllm.ops.attn");
  EXPECT_EQ(legacy_module_name("vllm", "ops/__init__.py"), "vllm.ops");
  EXPECT_EQ(legacy_module_name("vllm", "__init__.py"), "vllm");
  EXPECT_EQ(legacy_module_name("pkg", "./sub.py"), "pkg.sub");
}

TEST(PythonOverlay, AddModuleReplacesSameModuleAndKeepsOthers) {
  TempDir t;
  write_file(t / "a.py", "A = 1\n");
  write_file(t / "b.py", "B = 2\n");
  AddModuleRequest r;
  r.common.overlay = t / "ov";
  r.module = "pkg.x";
  r.patched_file = t / "a.py";
  add_module(real_disk(), r);
  r.module = "pkg.y";
  add_module(real_disk(), r);
  r.module = "pkg.x";
  r.patched_file = t / "b.py";
  add_module(real_disk(), r);
  Manifest m = *load_manifest(real_disk(), t / "ov");
  ASSERT_EQ(m.doc["modules"].size(), 2u);
  EXPECT_EQ(read_file(t / "ov/_patched/pkg.x.py"), "B = 2\n");
}

TEST(PythonOverlay, MalformedPythonEntriesRefused) {
  EXPECT_THROW(parse_manifest(R"({"modules": [{"module": 1, "file": "x"}]})"), ManifestError);
  EXPECT_THROW(parse_manifest(R"({"rebinds": [{"target": "a:b", "impl_module": "m"}]})"), ManifestError);
  EXPECT_THROW(parse_manifest(R"({"captures": [{"target": "a:b", "out": "/o", "max": "5"}]})"), ManifestError);
}
