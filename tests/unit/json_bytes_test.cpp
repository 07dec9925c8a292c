// Paths that are bytes, not text, through the manifest's JSON both ways: ours, and Python's
// json module with os.fsdecode/os.fsencode as overlay_setup.py uses them.
#include "overlay/json_bytes.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace overlay {
namespace {

using nlohmann::json;
using namespace overlay::test;

const std::string kOdd = std::string("/x/stale") + '\xfe' + ".o";  // not UTF-8

TEST(JsonBytes, ABytePathRoundTripsAndIsWrittenAsPythonWritesIt) {
  json j = {{"path", kOdd}, {std::string("k\xff"), "v"}};
  std::string text = dump_json_bytes(j);
  EXPECT_NE(text.find("stale\\udcfe.o"), std::string::npos) << text;
  EXPECT_NE(text.find("k\\udcff"), std::string::npos) << text;
  json back = parse_json_bytes(text);
  EXPECT_EQ(back["path"].get<std::string>(), kOdd);
  EXPECT_EQ(back[std::string("k\xff")].get<std::string>(), "v");
}

TEST(JsonBytes, TextAndRealNulsAndPairsAreLeftAsTheyAre) {
  std::string nul_then_hex = std::string("a") + '\0' + "fe";  // must not be read as the byte 0xfe
  json j = {{"t", "caf\xc3\xa9 \xf0\x9f\x98\x80"}, {"n", nul_then_hex}, {"odd", "\xc0\xaf\xed\xa0\x80"}};
  json back = parse_json_bytes(dump_json_bytes(j, 2));
  EXPECT_EQ(back, j);
  // A surrogate pair is a character, not two bytes; an escaped backslash is no escape.
  EXPECT_EQ(parse_json_bytes(R"({"p": "\ud83d\ude00", "q": "\\udcfe"})"),
            json({{"p", "\xf0\x9f\x98\x80"}, {"q", "\\udcfe"}}));
  EXPECT_THROW(parse_json_bytes(R"({"p": "\udc12"})"), json::parse_error);  // no byte of os.fsdecode
}

TEST(JsonBytes, PythonReadsOursAndWeReadPythons) {
  if (!have({"/usr/bin/python3", "-c", "pass"})) GTEST_SKIP() << "no /usr/bin/python3";
  TempDir dir;
  write_file(dir.path() / "ours.json", dump_json_bytes(json{{"path", kOdd}}, 2));
  Cmd py = run({"/usr/bin/python3", "-c",
                "import json,os,sys; d=json.load(open(sys.argv[1])); sys.stdout.buffer.write(os.fsencode(d['path']));"
                "json.dump({'path': d['path'] + os.fsdecode(b'\\xfd')}, open(sys.argv[2], 'w'), indent=2)",
                (dir.path() / "ours.json").string(), (dir.path() / "theirs.json").string()});
  ASSERT_EQ(py.rc, 0) << py.err;
  EXPECT_EQ(py.out, kOdd);
  EXPECT_EQ(parse_json_bytes(read_file(dir.path() / "theirs.json"))["path"].get<std::string>(), kOdd + '\xfd');
}

}  // namespace
}  // namespace overlay
