// Values of config keys: YAML node -> Config member (with type, range and choice checks and
// messages for people), Config member -> YAML text, and the closest-key suggestion for typos.
//
// Scalars are read strictly: an int key takes only an integer ("1.5" and "1e3" are errors), a bool
// key only true/false (any capitalisation, since MaxText files write True/False). Digits may be
// grouped with underscores (10_000) as in MaxText's YAML files. Floats must be finite.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tessera/config/schema.h"
#include "tessera/core/error.h"

namespace tessera::config {
namespace {

[[noreturn]] void value_error(const FieldSpec& f, const Origin& o, const std::string& what) {
  fail(ErrorKind::kConfig, "config key '{}' ({}): {}", f.name, o.where, what);
}

// A node as text for a message: scalars quoted, collections in flow style.
std::string show(const YAML::Node& n) {
  if (n.IsNull()) return "an empty value";
  if (n.IsScalar()) return fmt::format("'{}'", n.Scalar());
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// "10_000" -> "10000"; underscores only between digits, else returns "" (not a number).
std::string strip_digit_groups(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out.push_back(s[i]);
      continue;
    }
    bool between_digits = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                          std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) return "";
  }
  if (!out.empty() && out[0] == '+') out.erase(0, 1);
  return out;
}

std::optional<int64_t> parse_int(std::string_view text) {
  std::string s = strip_digit_groups(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_float(std::string_view text) {
  std::string s = strip_digit_groups(text);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true") return true;
  if (lower == "false") return false;
  return std::nullopt;
}

std::string join(const std::vector<std::string_view>& words) {
  std::string out;
  for (std::string_view w : words) out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

// What a key of this field's type takes, for "expected ..." messages.
std::string expected(const FieldSpec& f) {
  switch (f.type) {
    case FieldType::kBool:
      return "a bool (true or false)";
    case FieldType::kInt:
      return "an int";
    case FieldType::kFloat:
      return "a float";
    case FieldType::kChoice:
      return "one of: " + join(f.choices);
    default:
      return fmt::format("a {}", field_type_name(f.type));
  }
}

const YAML::Node& expect_scalar(const FieldSpec& f, const YAML::Node& n, const Origin& o) {
  if (!n.IsScalar()) value_error(f, o, fmt::format("expected {}, got {}", expected(f), show(n)));
  // A NUL ("\0" in a quoted scalar, or on the command line) would cut the value short in every
  // C API it reaches (file names, the run folder); no key takes one.
  if (size_t nul = n.Scalar().find('\0'); nul != std::string::npos)
    value_error(f, o,
                fmt::format("expected {}, got a value with a NUL character at offset {}", expected(f), nul));
  return n;
}

void check_range(const FieldSpec& f, const Origin& o, double v, const std::string& shown) {
  if (!f.range.contains(v))
    value_error(f, o, fmt::format("{} is out of range; allowed: {}", shown, f.range.describe()));
}

void set_choice(const FieldSpec& f, Config& cfg, const std::string& v, const Origin& o) {
  bool known = std::find(f.choices.begin(), f.choices.end(), v) != f.choices.end() ||
               std::find(f.unsupported.begin(), f.unsupported.end(), v) != f.unsupported.end();
  if (!known) {
    std::string hint = closest_word(v, f.choices);
    value_error(f, o,
                fmt::format("'{}' is not one of: {}{}", v, join(f.choices),
                            hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
  }
  cfg.*std::get<std::string Config::*>(f.member) = v;
}

std::vector<std::string> parse_string_list(const FieldSpec& f, const YAML::Node& n, const Origin& o) {
  if (!n.IsSequence())
    value_error(f, o, fmt::format("expected a list of strings such as [a, b], got {}", show(n)));
  std::vector<std::string> out;
  for (const YAML::Node& e : n) {
    if (!e.IsScalar()) value_error(f, o, fmt::format("list element {} is not a string", show(e)));
    const std::string& s = e.Scalar();
    if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
      value_error(f, o, fmt::format("list element '{}' is not one of: {}", s, join(f.choices)));
    out.push_back(s);
  }
  return out;
}

// `what` is the singular and `whats` the plural, for the message.
template <size_t N>
void check_axis_name(const FieldSpec& f, const Origin& o, const std::string& name,
                     const std::array<std::string_view, N>& allowed, std::string_view what,
                     std::string_view whats) {
  std::vector<std::string_view> names(allowed.begin(), allowed.end());
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string hint = closest_word(name, names);
  value_error(
      f, o,
      fmt::format("unknown {} '{}'{}; Tessera's {} are: {}", what, name,
                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), whats, join(names)));
}

AxisRule parse_rule(const FieldSpec& f, const YAML::Node& n, const Origin& o) {
  static const std::array<std::string_view, kNumMeshAxes> mesh_names = [] {
    std::array<std::string_view, kNumMeshAxes> a;
    for (int i = 0; i < kNumMeshAxes; ++i) a[i] = kMeshAxes[i].axis;
    return a;
  }();
  if (!n.IsSequence() || n.size() != 2 || !n[0].IsScalar() || !(n[1].IsScalar() || n[1].IsSequence()))
    value_error(
        f, o,
        fmt::format("rule {} is not [logical_axis, mesh_axis] or [logical_axis, [mesh_axis, ...]]", show(n)));
  AxisRule rule;
  rule.logical = n[0].Scalar();
  check_axis_name(f, o, rule.logical, kLogicalAxes, "logical axis", "logical axes");
  if (n[1].IsScalar()) {
    rule.mesh_axes.push_back(n[1].Scalar());
  } else {
    for (const YAML::Node& a : n[1]) {
      if (!a.IsScalar())
        value_error(f, o, fmt::format("rule {}: mesh axis {} is not a name", show(n), show(a)));
      rule.mesh_axes.push_back(a.Scalar());
    }
  }
  for (const std::string& a : rule.mesh_axes) check_axis_name(f, o, a, mesh_names, "mesh axis", "mesh axes");
  return rule;
}

std::string format_double(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // keep it a float to the eye
  return s;
}

std::string format_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + yaml_quote(items[i]);
  return out + "]";
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b) {
  auto lc = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = lc(a[i - 1]) == lc(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lc(a[i - 1]) == lc(b[j - 2]) && lc(a[i - 2]) == lc(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string_view field_type_name(FieldType t) {
  switch (t) {
    case FieldType::kBool:
      return "bool";
    case FieldType::kInt:
      return "int";
    case FieldType::kFloat:
      return "float";
    case FieldType::kString:
      return "string";
    case FieldType::kChoice:
      return "choice";
    case FieldType::kStringList:
      return "list of strings";
    case FieldType::kAxisRules:
      return "list of axis rules";
  }
  return "?";
}

std::string describe_allowed(const FieldSpec& f) {
  switch (f.type) {
    case FieldType::kBool:
      return "true or false";
    case FieldType::kInt:
    case FieldType::kFloat:
      return f.range.unbounded() ? "" : f.range.describe();
    case FieldType::kString:
      return "";
    case FieldType::kChoice:
      return join(f.choices);
    case FieldType::kStringList:
      return f.choices.empty() ? "" : "elements from: " + join(f.choices);
    case FieldType::kAxisRules: {
      std::vector<std::string_view> mesh;
      for (const MeshAxisInfo& m : kMeshAxes) mesh.push_back(m.axis);
      return fmt::format("logical axes: {}; mesh axes: {}",
                         join(std::vector<std::string_view>(kLogicalAxes.begin(), kLogicalAxes.end())),
                         join(mesh));
    }
  }
  return "";
}

bool Range::contains(double v) const {
  if (special && v == *special) return true;
  bool lo_ok = lo_open ? v > lo : v >= lo;
  bool hi_ok = hi_open ? v < hi : v <= hi;
  return lo_ok && hi_ok;
}

std::string Range::describe() const {
  auto num = [](double v) { return fmt::format("{}", v); };
  std::string body;
  bool has_lo = lo > -1e308, has_hi = hi < 1e308;
  if (has_lo && has_hi)
    body = fmt::format("{}{}, {}{}", lo_open ? "(" : "[", num(lo), num(hi), hi_open ? ")" : "]");
  else if (has_lo)
    body = fmt::format("{} {}", lo_open ? ">" : ">=", num(lo));
  else if (has_hi)
    body = fmt::format("{} {}", hi_open ? "<" : "<=", num(hi));
  else
    body = "any";
  if (!special) return body;
  return fmt::format("{} ({}) or {}", num(*special), special_meaning, body);
}

void set_field(const FieldSpec& f, Config& cfg, const YAML::Node& n, const Origin& o) {
  switch (f.type) {
    case FieldType::kBool: {
      auto v = parse_bool(expect_scalar(f, n, o).Scalar());
      if (!v) value_error(f, o, fmt::format("expected {}, got {}", expected(f), show(n)));
      cfg.*std::get<bool Config::*>(f.member) = *v;
      return;
    }
    case FieldType::kInt: {
      const std::string& s = expect_scalar(f, n, o).Scalar();
      auto v = parse_int(s);
      if (!v) value_error(f, o, fmt::format("expected {}, got {}", expected(f), show(n)));
      check_range(f, o, static_cast<double>(*v), s);
      cfg.*std::get<int64_t Config::*>(f.member) = *v;
      return;
    }
    case FieldType::kFloat: {
      const std::string& s = expect_scalar(f, n, o).Scalar();
      auto v = parse_float(s);
      if (!v) value_error(f, o, fmt::format("expected {}, got {}", expected(f), show(n)));
      check_range(f, o, *v, s);
      cfg.*std::get<double Config::*>(f.member) = *v;
      return;
    }
    case FieldType::kString:
      // An empty YAML value (`key:` or `key: null`) is the empty string.
      cfg.*std::get<std::string Config::*>(f.member) = n.IsNull() ? "" : expect_scalar(f, n, o).Scalar();
      return;
    case FieldType::kChoice:
      set_choice(f, cfg, expect_scalar(f, n, o).Scalar(), o);
      return;
    case FieldType::kStringList:
      cfg.*std::get<std::vector<std::string> Config::*>(f.member) = parse_string_list(f, n, o);
      return;
    case FieldType::kAxisRules: {
      if (!n.IsSequence())
        value_error(f, o, fmt::format("expected a list of [logical_axis, mesh_axes] rules, got {}", show(n)));
      std::vector<AxisRule> rules;
      for (const YAML::Node& r : n) rules.push_back(parse_rule(f, r, o));
      cfg.*std::get<std::vector<AxisRule> Config::*>(f.member) = std::move(rules);
      return;
    }
  }
}

void set_field_from_text(const FieldSpec& f, Config& cfg, const std::string& text, const Origin& o) {
  bool quoted = !text.empty() && (text[0] == '"' || text[0] == '\'');
  if ((f.type == FieldType::kString || f.type == FieldType::kChoice) && !quoted) {
    // Verbatim, so that a prompt may hold ': ' or ' #' without YAML reading it as a map or comment.
    set_field(f, cfg, YAML::Node(text), o);
    return;
  }
  YAML::Node n;
  try {
    n = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    value_error(f, o, fmt::format("cannot parse '{}' as a YAML value: {}", text, e.msg));
  }
  set_field(f, cfg, n, o);
}

std::string format_value(const FieldSpec& f, const Config& cfg) {
  switch (f.type) {
    case FieldType::kBool:
      return cfg.*std::get<bool Config::*>(f.member) ? "true" : "false";
    case FieldType::kInt:
      return std::to_string(cfg.*std::get<int64_t Config::*>(f.member));
    case FieldType::kFloat:
      return format_double(cfg.*std::get<double Config::*>(f.member));
    case FieldType::kString:
    case FieldType::kChoice:
      return yaml_quote(cfg.*std::get<std::string Config::*>(f.member));
    case FieldType::kStringList:
      return format_list(cfg.*std::get<std::vector<std::string> Config::*>(f.member));
    case FieldType::kAxisRules: {
      std::string out = "[";
      const auto& rules = cfg.*std::get<std::vector<AxisRule> Config::*>(f.member);
      for (size_t i = 0; i < rules.size(); ++i)
        out += fmt::format("{}[{}, {}]", i ? ", " : "", yaml_quote(rules[i].logical),
                           format_list(rules[i].mesh_axes));
      return out + "]";
    }
  }
  return "";
}

std::string yaml_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out.push_back(c);
    }
  }
  return out + "\"";
}

std::string closest_word(std::string_view word, const std::vector<std::string_view>& candidates) {
  // A typo is a few edits away: at most a third of the word (at least 2). Failing that, a word that
  // contains what was typed (ici_fsdp -> ici_fsdp_parallelism) is the likely intent.
  std::string_view best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (std::string_view c : candidates) {
    // The distance is at least the difference in length: a candidate that cannot beat the best is
    // skipped, which also keeps a huge unknown word from costing size x candidate length per key.
    const size_t length_gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (length_gap >= best_d) continue;
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty() || word.size() < 4) return std::string(best);
  for (std::string_view c : candidates)
    if (c.find(word) != std::string_view::npos && (best.empty() || c.size() < best.size())) best = c;
  return std::string(best);
}

std::string closest_key(std::string_view name) {
  std::vector<std::string_view> keys;
  for (const FieldSpec& f : schema()) keys.push_back(f.name);
  return closest_word(name, keys);
}

}  // namespace tessera::config
