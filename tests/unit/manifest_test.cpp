#include "overlay/manifest.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {
const std::string kSha(64, 'a');

// An entry exactly as overlay_setup.py writes it.
std::string legacy_manifest() {
  return R"({"modules": [{"module": "pkg.mod", "file": "_patched/pkg.mod.py"}], "rebinds": [], "captures": [],
  "natives": [{"sources": [{"install_path": "/opt/x/k.hip", "backup": "_native_backup/src_0_k.hip", "sha256": ")" +
         kSha + R"("}],
    "artifacts": [{"path": "/opt/x/k.so", "backup": "_native_backup/art_0_0_k.so", "sha256": ")" +
         kSha + R"(", "existed": true},
                  {"path": "/opt/x/new.so", "backup": null, "sha256": null, "existed": false}],
    "caches": [{"dir": "/opt/x/cache", "backup_tar": "_native_backup/cache_0_0.tar", "existed": true}],
    "build_cmds": [["make", "-C", "/opt/x"]], "build_cwd": "/opt/x",
    "verify": {"artifact": "/opt/x/k.so", "pre_sha256": ")" +
         kSha + R"("}, "future_key": {"kept": 1}}]})";
}

std::string expect_error(const std::string& text) {
  try {
    parse_manifest(text);
  } catch (const ManifestError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}
}  // namespace

TEST(Manifest, ReadsLegacyLayout) {
  Manifest m = parse_manifest(legacy_manifest());
  ASSERT_EQ(m.natives.size(), 1u);
  const NativeEntry& e = m.natives[0];
  EXPECT_EQ(e.id, "");
  EXPECT_EQ(e.sources[0].backup, "_native_backup/src_0_k.hip");
  EXPECT_TRUE(e.artifacts[0].existed);
  EXPECT_FALSE(e.artifacts[1].existed);
  EXPECT_EQ(e.artifacts[1].backup, "");
  EXPECT_EQ(*e.caches[0].backup_tar, "_native_backup/cache_0_0.tar");
  EXPECT_FALSE(e.caches[0].sha256);
  EXPECT_EQ(e.build_cmds[0], (std::vector<std::string>{"make", "-C", "/opt/x"}));
  EXPECT_EQ(*e.verify_artifact, "/opt/x/k.so");
}

TEST(Manifest, RoundTripKeepsEveryKeyAndType) {
  Manifest m = parse_manifest(legacy_manifest());
  json before = json::parse(legacy_manifest());
  json after = json::parse(serialize_manifest(m));
  EXPECT_EQ(after["modules"], before["modules"]);
  EXPECT_EQ(after["natives"][0]["future_key"], before["natives"][0]["future_key"]);
  // Every key of the original entry is still there with the same JSON type.
  for (auto& [k, v] : before["natives"][0].items()) {
    ASSERT_TRUE(after["natives"][0].contains(k)) << k;
    EXPECT_EQ(after["natives"][0][k].type(), v.type()) << k;
  }
  EXPECT_EQ(after["natives"][0]["artifacts"], before["natives"][0]["artifacts"]);
  EXPECT_EQ(after["natives"][0]["caches"][0]["backup_tar"], before["natives"][0]["caches"][0]["backup_tar"]);
}

TEST(Manifest, EmptyAndMissingArrays) {
  EXPECT_TRUE(parse_manifest("{}").natives.empty());
  // Never native: v3's empty manifest, byte for byte (json.dump(..., indent=2)).
  EXPECT_EQ(serialize_manifest(parse_manifest("{}")),
            "{\n  \"modules\": [],\n  \"rebinds\": [],\n  \"markers\": [],\n  \"captures\": []\n}");
  json j = json::parse(serialize_manifest(parse_manifest(R"({"natives": []})")));
  for (const char* k : {"modules", "rebinds", "captures", "natives"}) EXPECT_TRUE(j[k].is_array()) << k;
  EXPECT_EQ(j["overlay_format"], 1);
}

// What Python's json.dumps(m, indent=2) writes for the same document in v3's key order:
// sections and entry keys in upstream's order, non-ASCII escaped, a byte that is not UTF-8 as
// its surrogate escape (os.fsdecode's), no final newline.
TEST(Manifest, PythonOnlyIsWrittenAsV3WritesIt) {
  std::string in;
  in = "{\"rebinds\": [{\"impl_attr\": \"g\", \"target\": \"m:f\", \"impl_module\": \"i\"}], \"hooks\": [], "
       "\"modules\": [{\"file\": \"_patched/p.\\u00e9\\udcff.py\", \"module\": \"p.\xc3\xa9\"}]}";
  EXPECT_EQ(serialize_manifest(parse_manifest(in)),
            "{\n  \"modules\": [\n    {\n      \"module\": \"p.\\u00e9\",\n      \"file\": "
            "\"_patched/p.\\u00e9\\udcff.py\"\n    }\n  ],\n"
            "  \"rebinds\": [\n    {\n      \"target\": \"m:f\",\n      \"impl_module\": \"i\",\n      \"impl_attr\": "
            "\"g\"\n    }\n  ],\n"
            "  \"markers\": [],\n  \"captures\": [],\n  \"hooks\": []\n}");
}

TEST(Manifest, RejectsMalformedWithTheKeyNamed) {
  EXPECT_NE(expect_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(expect_error("[]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": {}})").find("natives: expected an array"), std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [null]})").find("natives[0]"), std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [{"sources": [{"install_path": 5}]}]})").find("sources[0].install_path"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [{"sources": [{"install_path": "rel/path", "backup": "b", "sha256": ")" + kSha +
                         R"("}]}]})")
                .find("not an absolute path"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [{"sources": [{"install_path": "/a", "backup": "b", "sha256": "zz"}]}]})")
                .find("sha256"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [{"artifacts": [{"path": "/a", "existed": "yes"}]}]})").find("existed"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"natives": [{"build_cmds": ["make all"]}]})").find("build_cmds[0]"), std::string::npos);
  EXPECT_NE(expect_error(R"({"modules": 3})").find("modules"), std::string::npos);
}

TEST(Manifest, NumberOverflowIsAManifestError) {  // found by manifest_fuzz
  EXPECT_NE(expect_error(R"({"natives": [{"sources": [{"sha256": 4333333333333333E333}]}]})").find("not valid JSON"),
            std::string::npos);
}

TEST(Manifest, RejectsBackupPathsThatEscape) {
  for (const char* b : {"/etc/passwd", "../outside", "_native_backup/../../x", ""}) {
    std::string text = R"({"natives": [{"sources": [{"install_path": "/a", "backup": ")" + std::string(b) +
                       R"(", "sha256": ")" + kSha + R"("}]}]})";
    EXPECT_NE(expect_error(text).find("backup"), std::string::npos) << b;
  }
}

TEST(Manifest, SaveIsAtomicAndLoadable) {
  TempDir t;
  Manifest m = parse_manifest(legacy_manifest());
  save_manifest(real_disk(), t.path(), m);
  EXPECT_FALSE(fs::exists(t / (std::string(kManifestName) + ".lock")));
  auto back = load_manifest(real_disk(), t.path());
  ASSERT_TRUE(back);
  EXPECT_EQ(serialize_manifest(*back), serialize_manifest(m));
  EXPECT_FALSE(load_manifest(real_disk(), t / "none"));
}

TEST(Manifest, SafeRelative) {
  EXPECT_TRUE(is_safe_relative("_native_backup/x/y"));
  EXPECT_FALSE(is_safe_relative("/abs"));
  EXPECT_FALSE(is_safe_relative("a/../../b"));
  EXPECT_FALSE(is_safe_relative(std::string("a\0b", 3)));
}

TEST(Manifest, CreatedAndDeletedFilesRoundTrip) {
  std::string sha(64, 'a');
  std::string text = R"({"natives":[{"id":"n1","sources":[{"install_path":"/x/old.h","backup":"b/src_0","sha256":")" +
                     sha + R"(","deleted":true}],"created_files":[{"path":"/x/new.h","sha256":")" + sha +
                     R"(","extra":1}]}]})";
  Manifest m = parse_manifest(text);
  ASSERT_EQ(m.natives[0].created.size(), 1u);
  EXPECT_EQ(m.natives[0].created[0].path, "/x/new.h");
  EXPECT_TRUE(m.natives[0].sources[0].deleted);
  Manifest again = parse_manifest(serialize_manifest(m));
  EXPECT_TRUE(again.natives[0].sources[0].deleted);
  EXPECT_EQ(again.natives[0].created[0].raw["extra"], 1);
  EXPECT_THROW(parse_manifest(R"({"natives":[{"created_files":[{"path":"rel/x","sha256":")" + sha + R"("}]}]})"),
               ManifestError);
  EXPECT_THROW(parse_manifest(R"({"natives":[{"created_files":[{"path":"/x"}]}]})"), ManifestError);
}

// Each item type has its nlohmann ADL pair: an item converts to JSON and back unchanged, keys
// it does not know ride along, and a problem deep inside is named by its whole path.
TEST(Manifest, EachItemTypeRoundTripsThroughItsOwnJsonPair) {
  SourceItem s;
  s.install_path = "/i/a.c";
  s.backup = "_native_backup/a.c";
  s.sha256 = kSha;
  s.mode = 04755;
  s.owner = FileOwner{65534, 65534};
  s.xattrs = Xattrs{{"user.t", std::string("\0\xff", 2)}};
  s.parent = PinnedDir{"/i", 1, 2, "sub"};
  s.raw = {{"future", 1}};
  json j = s;
  EXPECT_EQ(j["future"], 1);
  EXPECT_EQ(j["parent"]["below"], "sub");
  SourceItem back = j.get<SourceItem>();
  EXPECT_EQ(back.mode, s.mode);
  EXPECT_EQ(back.owner, s.owner);
  EXPECT_EQ(back.xattrs, s.xattrs);
  EXPECT_EQ(back.parent->below, "sub");
  EXPECT_EQ(json(back), j);

  CacheItem c;
  c.dir = "/i/cache";
  c.existed = true;
  c.aside = AsideDir{"/i/.cache.overlay-aside-n1", 1, 3, 0};
  EXPECT_EQ(json(json(c).get<CacheItem>()), json(c));
  RunningPatched r{"/i/lib.so", 1, 2, 7, 8, "srv", "n1"};
  EXPECT_EQ(json(r).get<RunningPatched>().cmdline, "srv");
}

TEST(Manifest, AProblemIsNamedByItsWholePath) {
  std::string aside = R"({"natives": [{"caches": [{"dir": "/i/c", "existed": true, "backup_tar": "t"},
    {"dir": "/i/c", "aside": {"path": "/elsewhere/x", "dev": 1, "ino": 2, "uid": 0}}]}]})";
  EXPECT_NE(expect_error(aside).find("manifest: natives[0].caches[1].aside.path: not the aside sibling"),
            std::string::npos);
  std::string parent =
      R"({"natives": [{"artifacts": [{"path": "/a", "existed": false, "parent": {"path": "/i", "dev": -1, "ino": 2}}]}]})";
  EXPECT_NE(expect_error(parent).find("manifest: natives[0].artifacts[0].parent.dev:"), std::string::npos);
  EXPECT_EQ(expect_error(R"({"captures": 1})"), "manifest: captures: expected an array");
  EXPECT_EQ(expect_error(R"({"running_patched": [{"path": "/a", "dev": 1, "ino": 2, "pid": 0, "start_ticks": 1}]})"),
            "manifest: running_patched[0].pid: not a process id");
  try {
    json{{"path", "rel"}, {"sha256", kSha}}.get<CreatedItem>();
    ADD_FAILURE() << "accepted";
  } catch (const ManifestError& e) {
    EXPECT_STREQ(e.what(), "manifest: path: not an absolute path: rel");
  }
}

// The manifest's bytes do not depend on how the model holds a backed-up file (issue 41 made the
// four records one FileBackup): tests/unit/data/manifest_bytes/X.expected is what the code before
// that change wrote for X.json (serialize(parse(X)), or its refusal), and it still must be. The
// inputs: manifests the binary wrote (a diff with a created, a deleted and a hard-linked xattr'd
// source, a new artifact, a moved cache; a tar cache; a Python module), the fuzz corpus, keys
// added by hand (unknown ones, an absent artifact's mode) and three refusals.
TEST(ManifestBytes, SerializationIsThatOfTheRecordsBeforeFileBackup) {
  fs::path dir = source_dir() / "tests/unit/data/manifest_bytes";
  int checked = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".json") continue;
    std::string out;
    try {
      out = serialize_manifest(parse_manifest(read_file(f.path())));
    } catch (const ManifestError& e) {
      out = std::string("refused: ") + e.what() + "\n";
    }
    fs::path expected = f.path();
    expected.replace_extension(".expected");
    EXPECT_EQ(out, read_file(expected)) << f.path().filename();
    ++checked;
  }
  EXPECT_GE(checked, 11);
}

// An owner's lease is "ENGINE_job": ID, whichever engine issued it (Slurm's key is the one every
// version wrote); it reads back the same, and a lease that is not a string is refused.
TEST(Manifest, AnOwnersLeaseIsKeptWhateverItsEngine) {
  for (const char* key : {"slurm_job", "ray_job"}) {
    json doc = json::parse(legacy_manifest());
    doc["natives"][0]["owner"] = {{"pid", 12}, {"start_ticks", 34}, {"host", "login1"}, {key, "77"}};
    Manifest m = parse_manifest(doc.dump());
    ASSERT_TRUE(m.natives[0].owner);
    EXPECT_EQ(m.natives[0].owner->lease.id, "77");
    EXPECT_EQ(m.natives[0].owner->lease.engine, std::string(key).substr(0, std::string(key).find('_')));
    json back = json::parse(serialize_manifest(m));
    EXPECT_EQ(back["natives"][0]["owner"], doc["natives"][0]["owner"]) << key;
  }
  // Two leases (never written by this tool): the one of an engine this binary asks wins.
  json two = json::parse(legacy_manifest());
  two["natives"][0]["owner"] = {
      {"pid", 12}, {"start_ticks", 34}, {"a-job_job", "9"}, {"slurm_job", "77"}, {"zz_job", "8"}};
  EXPECT_EQ(parse_manifest(two.dump()).natives[0].owner->lease, (Lease{"slurm", "77"}));
  two["natives"][0]["owner"].erase("slurm_job");
  EXPECT_EQ(parse_manifest(two.dump()).natives[0].owner->lease, (Lease{"a-job", "9"}));  // none known: the first
  json doc = json::parse(legacy_manifest());
  doc["natives"][0]["owner"] = {{"pid", 12}, {"start_ticks", 34}, {"slurm_job", 77}};
  EXPECT_NE(expect_error(doc.dump()).find("slurm_job"), std::string::npos);
}
