#pragma once
// JSON text for strings that are bytes, not text. A Linux file name is any byte string but NUL
// and '/', and JSON holds only Unicode; nlohmann refuses both ways (type_error 316 on dump, a
// parse error on a lone surrogate). overlay_setup.py meets such names as Python does everywhere:
// os.fsdecode turns each byte that is not UTF-8 into a lone surrogate U+DC80..U+DCFF, and
// json.dump writes it as the escape "\udcXX". These two read and write that same form, so every
// string stays the exact bytes it was, and either tool reads what the other wrote.
#include <string>

#include <nlohmann/json.hpp>

namespace overlay {

// Parses `text`; each "\udc80".."\udcff" escape not paired with a high surrogate becomes the
// byte 0x80..0xff in its string (object keys included). Throws nlohmann's parse_error otherwise,
// as json::parse does.
nlohmann::json parse_json_bytes(const std::string& text);

// Dumps `j` (indent as json::dump; -1 for one line). Every byte of a string that is not part
// of valid UTF-8 is written "\udcXX"; valid UTF-8 is written as it is (ensure_ascii off).
std::string dump_json_bytes(const nlohmann::json& j, int indent = -1);

// As dump_json_bytes, for a document whose key order matters, written as Python's
// json.dump(j, f, indent=indent) writes it (ensure_ascii: every character beyond ASCII escaped).
std::string dump_json_bytes_ascii(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace overlay
