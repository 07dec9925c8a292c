// overlay_setup.py's on-disk layout, reverted by the real binary.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

TEST(Compat, RevertsOverlaySetupPyLayout) {
  TempDir t;
  Install in = make_install(t / "inst");
  fs::permissions(in.cache, fs::perms(0751));  // a mode of its own: it must come back too
  std::string before = tree_digest(in.root);
  fs::path ov = t / "ov";
  fs::create_directories(ov / "_native_backup");
  fs::copy_file(in.source, ov / "_native_backup/src_0_kernel.cpp");
  fs::copy_file(in.artifact, ov / "_native_backup/art_0_0_libk.so");
  // Exactly what overlay_setup.py writes: members "cache" and "cache/...".
  Cmd tar = run({"python3", "-c",
                 "import os,tarfile,sys; t=tarfile.open(sys.argv[1],'w'); t.add(sys.argv[2], "
                 "arcname=os.path.basename(sys.argv[2])); t.close()",
                 (ov / "_native_backup/cache_0_0.tar").string(), in.cache.string()});
  ASSERT_EQ(tar.rc, 0) << tar.err;
  json m = {
      {"modules", json::array()},
      {"rebinds", json::array()},
      {"captures", json::array()},
      {"natives",
       {{{"sources",
          {{{"install_path", in.source.string()},
            {"backup", "_native_backup/src_0_kernel.cpp"},
            {"sha256", file_sha256(in.source)}}}},
         {"artifacts",
          {{{"path", in.artifact.string()},
            {"backup", "_native_backup/art_0_0_libk.so"},
            {"sha256", file_sha256(in.artifact)},
            {"existed", true}}}},
         {"caches", {{{"dir", in.cache.string()}, {"backup_tar", "_native_backup/cache_0_0.tar"}, {"existed", true}}}},
         {"build_cmds", {{"make"}}},
         {"build_cwd", in.root.string()},
         {"verify", {{"artifact", in.artifact.string()}, {"pre_sha256", file_sha256(in.artifact)}}}}}}};
  write_file(ov / "_overlay_manifest.json", m.dump(2));
  // The install as the Python tool leaves it: patched, rebuilt, cache rebuilt.
  write_file(in.source, "patched\n");
  write_file(in.artifact, "rebuilt\n");
  fs::remove_all(in.cache);
  write_file(in.cache / "jit/new", "x");
  Cmd r = run_overlay({"revert", "--overlay", ov.string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_TRUE(fs::is_empty(ov / "_native_backup"));
  json after = json::parse(read_file(ov / "_overlay_manifest.json"));
  EXPECT_TRUE(after["natives"].empty());
  EXPECT_TRUE(after["modules"].is_array());
}
