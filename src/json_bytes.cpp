#include "overlay/json_bytes.hpp"

#include <cstdint>
#include <string_view>

namespace overlay {
namespace {

using nlohmann::json;

// Inside nlohmann the bytes travel in a marker no text can hold: NUL followed by two hex digits
// (the byte, or "00" for a NUL the string really has), as the JSON escape "\u0000" plus "XX".
constexpr std::string_view kNulEscape = "\\u0000";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

char hex_digit(int v) { return "0123456789abcdef"[v & 15]; }

// The code unit of the "\uXXXX" escape starting at text[i] (a backslash), or -1.
long escape_unit(std::string_view text, std::size_t i) {
  if (i + 6 > text.size() || text[i + 1] != 'u') return -1;
  long v = 0;
  for (std::size_t k = i + 2; k < i + 6; ++k) {
    int h = hex_value(text[k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// The text with surrogate-escaped bytes and real NULs turned into markers; false when it has
// neither (then it is parsed as it is). Escapes can only be inside strings, so a linear scan that
// steps over each escape whole sees every one and nothing else.
bool to_markers(std::string_view text, std::string& out) {
  bool changed = false;
  long prev_unit = -1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      prev_unit = -1;
      continue;
    }
    long unit = escape_unit(text, i);
    bool paired = prev_unit >= 0xD800 && prev_unit <= 0xDBFF;
    if (unit == 0 || (unit >= 0xDC80 && unit <= 0xDCFF && !paired)) {
      out += kNulEscape;
      out += hex_digit(static_cast<int>(unit >> 4));
      out += hex_digit(static_cast<int>(unit));
      changed = true;
      prev_unit = -1;
      i += 5;
      continue;
    }
    std::size_t len = unit >= 0 ? 6 : 2;
    out.append(text.substr(i, len));
    prev_unit = unit;
    i += len - 1;
  }
  return changed;
}

// A marked string back to its bytes.
std::string from_markers(const std::string& s) {
  if (s.find('\0') == std::string::npos) return s;
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\0' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  unsigned char c1 = b(i + 1);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
    return 0;
  return n;
}

// Whether the string needs markers: a NUL or a byte outside valid UTF-8.
bool needs_markers(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '\0') return true;
    std::size_t n = utf8_length(s, i);
    if (n == 0) return true;
    i += n;
  }
  return false;
}

std::string with_markers(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = s[i] == '\0' ? 0 : utf8_length(s, i);
    if (n == 0) {
      auto byte = static_cast<unsigned char>(s[i]);
      out += '\0';
      out += hex_digit(byte >> 4);
      out += hex_digit(byte);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// A copy of j with every string (keys too) passed through `f`.
template <typename J, typename F>
J map_strings(const J& j, const F& f) {
  if (j.is_string()) return f(j.template get_ref<const std::string&>());
  if (j.is_array()) {
    J out = J::array();
    for (const auto& v : j) out.push_back(map_strings(v, f));
    return out;
  }
  if (j.is_object()) {
    J out = J::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[f(it.key())] = map_strings(it.value(), f);
    return out;
  }
  return j;
}

template <typename J>
bool any_string(const J& j, bool (*pred)(std::string_view)) {
  if (j.is_string()) return pred(j.template get_ref<const std::string&>());
  if (j.is_array()) {
    for (const auto& v : j)
      if (any_string(v, pred)) return true;
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (pred(it.key()) || any_string(it.value(), pred)) return true;
  }
  return false;
}

// The dumped text of a marked document with each marker written as Python writes the byte.
std::string markers_to_escapes(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      if (text.compare(i, kNulEscape.size(), kNulEscape) == 0 && i + 7 < text.size()) {
        int hi = hex_value(text[i + 6]), lo = hex_value(text[i + 7]);
        int byte = hi < 0 || lo < 0 ? 0 : hi * 16 + lo;
        out += byte == 0 ? std::string(kNulEscape) : std::string("\\udc") + hex_digit(hi) + hex_digit(lo);
        i += 7;
      } else {
        out += text[i];
        out += text[i + 1];
        ++i;
      }
      continue;
    }
    out += text[i];
  }
  return out;
}

}  // namespace

json parse_json_bytes(const std::string& text) {
  std::string marked;
  if (text.find("\\u") == std::string::npos || !to_markers(text, marked)) return json::parse(text);
  return map_strings(json::parse(marked), from_markers);
}

std::string dump_json_bytes(const json& j, int indent) {
  if (!any_string(j, needs_markers)) return j.dump(indent);
  return markers_to_escapes(map_strings(j, with_markers).dump(indent));
}

std::string dump_json_bytes_ascii(const nlohmann::ordered_json& j, int indent) {
  if (!any_string(j, needs_markers)) return j.dump(indent, ' ', true);
  return markers_to_escapes(map_strings(j, with_markers).dump(indent, ' ', true));
}

}  // namespace overlay
